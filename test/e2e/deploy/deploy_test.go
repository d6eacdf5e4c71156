// Package deploy_test proves the manifests of deploy/ against real API
// servers: east links west. deploy/remote-link.yaml is applied to west,
// deploy/controller.yaml and deploy/coredns.yaml to east; then real
// coredns-mc processes run in east as the ServiceAccounts those manifests
// bind, with the arguments and the Corefile the manifests carry, and must
// mirror and answer what west exports. The Deployments cannot run here (no
// kubelet pulls images): it is enough that the API server accepts them.
// The processes are not a harness fleet's: each runs with what its
// manifest says (arguments, ServiceAccount, Corefile), which is what is
// proved.
package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"}, {Name: "west", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	wait = 90 * time.Second
	tick = 100 * time.Millisecond
	zone = "svc.cluster.local."
)

// ---- manifests -----------------------------------------------------------

// object decodes the object kind ns/name of a manifest.
func object[T any](t *testing.T, text, kind, ns, name string) *T {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			out := new(T)
			require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true))
			return out
		}
	}
	t.Fatalf("no %s %s/%s in the manifest", kind, ns, name)
	return nil
}

// controllerDeployment is the Deployment of deploy/controller.yaml.
func controllerDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	return object[appsv1.Deployment](t, harness.RepoFile(t, "deploy", "controller.yaml"),
		"Deployment", "mcmirror", "mcmirror-controller")
}

// flagValue returns the value of --name=value in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("no --%s= in %q", name, args)
	return ""
}

// applyManifests applies the manifests of deploy/ to the clusters that take
// them, and makes kube-system/coredns as kubeadm would.
func applyManifests(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	require.NoError(t, west.Apply(ctx, harness.RepoFile(t, "deploy", "remote-link.yaml")))
	require.NoError(t, east.Apply(ctx, harness.RepoFile(t, "deploy", "controller.yaml")))
	require.NoError(t, east.Apply(ctx, serviceAccount("kube-system", "coredns")))
	require.NoError(t, east.Apply(ctx, harness.RepoFile(t, "deploy", "coredns.yaml")))
}

// linkWest writes, in east's namespace ns, the Linkerd-format link Secret
// for west, with the credentials of deploy/remote-link.yaml, as
// deploy/README.md tells an operator to.
func linkWest(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	kc, err := west.LinkKubeconfig(ctx)
	require.NoError(t, err)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: labels.LinkSecretNamePrefix + "west", Namespace: ns,
			Labels: map[string]string{labels.LinkClusterName: "west"},
		},
		Type: corev1.SecretType(labels.LinkSecretType),
		Data: map[string][]byte{labels.LinkSecretKey: kc},
	}
	_, err = east.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = east.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	require.NoError(t, err)
}

// ---- workloads -----------------------------------------------------------

// statefulSet is headless nginx-svc (port http 80) with StatefulSet
// nginx-set of replicas pods behind it, exported with export.
func statefulSet(ns string, replicas int, export string) string {
	return harness.StatefulSet(ns, "nginx-svc", "nginx-set", replicas, map[string]string{labels.Exported: export})
}

// ---- processes -----------------------------------------------------------

// controllerProc is a running `coredns-mc controller`.
type controllerProc struct {
	proc    *harness.Process
	metrics string // host:port of /metrics and /healthz
}

// startController runs `coredns-mc controller` in east exactly as the
// Deployment of deploy/controller.yaml runs it (its arguments, its
// ServiceAccount), except for what only makes sense in a pod: the
// in-cluster configuration becomes a kubeconfig of the same
// ServiceAccount, and the metrics listen on a free loopback port.
func startController(t *testing.T, name string) *controllerProc {
	t.Helper()
	d := controllerDeployment(t)
	spec := d.Spec.Template.Spec
	kubeconfig := accountKubeconfig(t, env.Cluster("east"), d.Namespace, spec.ServiceAccountName)
	metrics := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	argv := append(localArgv(t, spec.Containers[0], map[string]string{"--metrics-addr": metrics}),
		"--kubeconfig="+kubeconfig, "--v=2")
	p := &controllerProc{proc: env.StartProcess(t, "east/"+name, nil, argv...), metrics: metrics}
	// The probes of the Deployment: /healthz of --metrics-addr.
	waitProbe(t, p.proc, metrics, spec.Containers[0].LivenessProbe)
	return p
}

// localArgv is coredns-mc with the arguments of ctr, except that each flag
// of values (which ctr must set once) takes its value there, or is left out
// where that is empty.
func localArgv(t *testing.T, ctr corev1.Container, values map[string]string) []string {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	argv := []string{bin}
	seen := map[string]int{}
	for _, a := range ctr.Args {
		flag, _, _ := strings.Cut(a, "=")
		v, ok := values[flag]
		seen[flag]++
		if !ok {
			argv = append(argv, a)
		} else if v != "" {
			argv = append(argv, flag+"="+v)
		}
	}
	for f := range values {
		require.Equal(t, 1, seen[f], "the Deployment sets %s once", f)
	}
	return argv
}

// waitProbe waits until the process p, listening on addr, answers the
// HTTP probe with 200.
func waitProbe(t *testing.T, p *harness.Process, addr string, probe *corev1.Probe) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := p.Exited()
		require.False(c, done, "%s exited: %v\n%s", p.Name, err, p.Tail(20))
		resp, err := http.Get("http://" + addr + probe.HTTPGet.Path)
		require.NoError(c, err)
		resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode)
	}, wait, tick, "%s answers %s", p.Name, probe.HTTPGet.Path)
}

// assertHardened checks the securityContexts of a pod spec and its first
// container: not root, a read-only root filesystem, no privilege
// escalation.
func assertHardened(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	require.NotNil(t, spec.SecurityContext)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	require.NotNil(t, spec.Containers[0].SecurityContext)
	assert.True(t, *spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem)
	assert.False(t, *spec.Containers[0].SecurityContext.AllowPrivilegeEscalation)
}

// corefile returns the Corefile of deploy/coredns.yaml's ConfigMap.
func corefile(t *testing.T) string {
	t.Helper()
	cm := object[corev1.ConfigMap](t, harness.RepoFile(t, "deploy", "coredns.yaml"),
		"ConfigMap", "kube-system", "coredns-mcmirror")
	require.Contains(t, cm.Data, "Corefile")
	return cm.Data["Corefile"]
}

// startDNS runs coredns-mc with the Corefile of deploy/coredns.yaml, adapted
// to a process on this host: loopback and free ports instead of :53, :8080,
// :8181 and :9153, and the kubeconfig of kube-system/coredns (the
// ServiceAccount the manifest grants to) instead of the in-cluster
// configuration.
func startDNS(t *testing.T) *harness.DNSServer {
	t.Helper()
	kubeconfig := accountKubeconfig(t, env.Cluster("east"), "kube-system", "coredns")
	cf, err := harness.HostCorefile(corefile(t), kubeconfig, harness.FreePort(t))
	require.NoError(t, err)
	// StartDNS waits for ready and for kubernetes.default to answer:
	// through the kubernetes plugin, with the same RBAC.
	s := env.StartDNS(t, "east/coredns-mc", cf)
	require.Len(t, s.Ask(t, "udp", "kubernetes.default."+zone, dns.TypeA).Answer, 1)
	return s
}

// ---- tests ---------------------------------------------------------------

// The manifests are accepted as they are, say what they should, and agree
// with each other.
func TestManifests(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	east := env.Cluster("east")

	d := controllerDeployment(t)
	got, err := east.Client.AppsV1().Deployments("mcmirror").Get(ctx, "mcmirror-controller", metav1.GetOptions{})
	require.NoError(t, err, "the API server took the Deployment")
	assert.Equal(t, int32(2), *got.Spec.Replicas)

	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	assert.Equal(t, "ghcr.io/mcmirror/coredns-mc:latest", ctr.Image)
	assert.Equal(t, "controller", ctr.Args[0])
	assert.Contains(t, ctr.Args, "--leader-elect")
	assert.Equal(t, "mcmirror", flagValue(t, ctr.Args, "leader-elect-namespace"))
	assert.NotContains(t, ctr.Args, "--create-namespaces", "namespaces: list and watch only, so no --create-namespaces")
	assert.Equal(t, "mcmirror-controller", spec.ServiceAccountName)
	assertHardened(t, spec)
	assert.NotEmpty(t, ctr.Resources.Requests)
	_, port, err := net.SplitHostPort(flagValue(t, ctr.Args, "metrics-addr"))
	require.NoError(t, err)
	require.Len(t, ctr.Ports, 1)
	assert.Equal(t, port, strconv.Itoa(int(ctr.Ports[0].ContainerPort)), "the metrics port is --metrics-addr's")
	for _, p := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		require.NotNil(t, p)
		require.NotNil(t, p.HTTPGet)
		assert.Equal(t, "/healthz", p.HTTPGet.Path)
		assert.Equal(t, ctr.Ports[0].Name, p.HTTPGet.Port.String())
	}

	// One replica at a time may be evicted, of the controller and of the
	// cluster DNS (kubeadm's pods, k8s-app=kube-dns).
	for _, b := range []struct {
		ns, name string
		pods     map[string]string
	}{
		{"mcmirror", "mcmirror-controller", d.Spec.Template.Labels},
		{"kube-system", "coredns", map[string]string{"k8s-app": "kube-dns"}},
	} {
		pdb, err := east.Client.PolicyV1().PodDisruptionBudgets(b.ns).Get(ctx, b.name, metav1.GetOptions{})
		require.NoError(t, err, "PodDisruptionBudget %s/%s", b.ns, b.name)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		require.NoError(t, err)
		assert.True(t, sel.Matches(k8slabels.Set(b.pods)), "PodDisruptionBudget %s/%s covers %v", b.ns, b.name, b.pods)
		require.NotNil(t, pdb.Spec.MaxUnavailable)
		assert.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())
	}

	// The Lease the Role lets it renew is the one the flags name.
	role := object[rbacv1.Role](t, harness.RepoFile(t, "deploy", "controller.yaml"),
		"Role", "mcmirror", "mcmirror-controller-leader-election")
	var names []string
	for _, r := range role.Rules {
		names = append(names, r.ResourceNames...)
	}
	assert.Equal(t, []string{flagValue(t, ctr.Args, "leader-elect-name")}, names)

	// The DNS and the controller agree on the cluster name and on where
	// the link Secrets are, and the secrets Roles are in that namespace.
	cf := corefile(t)
	assert.Contains(t, cf, "\n        cluster "+flagValue(t, ctr.Args, "cluster")+"\n")
	linkNS := flagValue(t, ctr.Args, "link-secrets")
	assert.Contains(t, cf, "\n        link_secrets "+linkNS+"\n")
	object[rbacv1.Role](t, harness.RepoFile(t, "deploy", "controller.yaml"),
		"Role", linkNS, "mcmirror-controller-link-secrets")
	object[rbacv1.Role](t, harness.RepoFile(t, "deploy", "coredns.yaml"),
		"Role", linkNS, "mcmirror-coredns-link-secrets")
}

// The controller, run as the ServiceAccount of deploy/controller.yaml with
// the Deployment's arguments (two replicas, leader election on), links west
// through a link Secret and mirrors its export: the RBAC is sufficient.
func TestControllerRBACSuffices(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	east, west := env.Cluster("east"), env.Cluster("west")
	d := controllerDeployment(t)
	args := d.Spec.Template.Spec.Containers[0].Args
	linkWest(t, flagValue(t, args, "link-secrets"))

	const ns = "deploy-ctrl"
	env.TempNamespace(t, ns, east, west)
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 2, labels.ExportGateway)))
	// Exported from a namespace east does not have: an Event says so
	// (the events permission; --create-namespaces is off).
	const absent = "deploy-absent"
	env.TempNamespace(t, absent, west)
	require.NoError(t, west.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %s, labels: {%s: "true"}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80}]
`, absent, labels.Exported)))

	replicas := []*controllerProc{startController(t, "mcmirror-controller-0"), startController(t, "mcmirror-controller-1")}

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := env.Cluster("east").Mirrors(ctx, ns)
		require.NoError(c, err)
		assert.ElementsMatch(c, []string{"nginx-svc-west", "nginx-set-0-west", "nginx-set-1-west"},
			slices.Collect(maps.Keys(m)))
		for name, s := range m {
			assert.Equal(c, labels.ManagedByValue, s.Labels[labels.ManagedBy], name)
			assert.Equal(c, "west", s.Labels[labels.ClusterName], name)
		}
		es, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		assert.Len(c, es.Items, 3, "one EndpointSlice per mirror")
	}, wait, tick, "west's export is mirrored in east")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, err := east.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		assert.True(c, slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == controller.ReasonNamespaceMissing && e.InvolvedObject.Name == absent
		}), "a %s Event on Namespace %s", controller.ReasonNamespaceMissing, absent)
	}, wait, tick)

	// One replica leads, holding the Lease the flags name; the other
	// follows (it could read the Lease).
	lease, err := east.Client.CoordinationV1().Leases(flagValue(t, args, "leader-elect-namespace")).
		Get(ctx, flagValue(t, args, "leader-elect-name"), metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		leading, following := 0, 0
		for _, r := range replicas {
			l := r.proc.Log(t)
			if strings.Contains(l, `"Leading"`) {
				leading++
			}
			if strings.Contains(l, `"Following"`) {
				following++
			}
		}
		assert.Equal(c, 1, leading, "leaders")
		assert.Equal(c, 1, following, "followers")
	}, wait, tick)

	// The leader's metrics show the link.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		links := 0
		for _, r := range replicas {
			v, _ := harness.SeriesValue(c, "http://"+r.metrics+"/metrics", "coredns_mcmirror_controller_links")
			if v == 1 {
				links++
			}
		}
		assert.Equal(c, 1, links, "the leader links west")
	}, wait, tick)

	// Nothing it tried was refused.
	for _, r := range replicas {
		assert.NotContains(t, strings.ToLower(r.proc.Log(t)), "forbidden", "%s: every call was allowed", r.proc.Name)
	}
}

// coredns-mc, run as kube-system/coredns with only the RBAC of
// deploy/coredns.yaml and the Corefile of its ConfigMap, links west through
// the link Secret and answers multi-cluster names: gateway mode (the mirror
// the controller makes, run as its own ServiceAccount) and flat mode.
func TestCoreDNSRBACSuffices(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	east, west := env.Cluster("east"), env.Cluster("west")
	linkWest(t, flagValue(t, controllerDeployment(t).Spec.Template.Spec.Containers[0].Args, "link-secrets"))

	const gw, flat = "deploy-dns-gw", "deploy-dns-flat"
	env.TempNamespace(t, gw, east, west)
	env.TempNamespace(t, flat, east, west)
	require.NoError(t, west.Apply(ctx, statefulSet(gw, 2, labels.ExportGateway)))
	require.NoError(t, west.Apply(ctx, statefulSet(flat, 2, labels.ExportFlat)))
	ctrl := startController(t, "mcmirror-controller")
	s := startDNS(t)

	// Gateway mode: a pod of west by name, at its mirror's ClusterIP in
	// east.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := env.Cluster("east").Mirrors(ctx, gw)
		require.NoError(c, err)
		pod, ok := m["nginx-set-0-west"]
		require.True(c, ok, "per-pod mirror nginx-set-0-west")
		r := s.Ask(c, "udp", "nginx-set-0.nginx-svc-west."+gw+"."+zone, dns.TypeA)
		require.Equal(c, dns.RcodeSuccess, r.Rcode)
		assert.Equal(c, []string{pod.Spec.ClusterIP}, harness.Answers(r))
	}, wait, tick, "nginx-set-0.nginx-svc-west.%s answers the mirror ClusterIP", gw)

	// Flat mode: west's ready pod addresses.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := west.ReadyEndpoints(ctx, flat, "nginx-svc")
		require.NoError(c, err)
		want := slices.Sorted(maps.Values(pods))
		require.Len(c, want, 2)
		r := s.Ask(c, "udp", "nginx-svc-west."+flat+"."+zone, dns.TypeA)
		require.Equal(c, dns.RcodeSuccess, r.Rcode)
		assert.Equal(c, want, harness.Answers(r))
	}, wait, tick, "nginx-svc-west.%s answers west's pods", flat)

	for _, p := range []*harness.Process{s.Process, ctrl.proc} {
		assert.NotContains(t, strings.ToLower(p.Log(t)), "forbidden", "%s: every call was allowed", p.Name)
	}
}

// access is one SelfSubjectAccessReview.
type access struct {
	verb, group, resource, ns, name string
}

func (a access) String() string {
	return fmt.Sprintf("%s %s.%s ns=%q name=%q", a.verb, a.resource, a.group, a.ns, a.name)
}

// accesses are each of verbs (space-separated) on resource of group, in each
// of namespaces.
func accesses(verbs, group, resource string, namespaces ...string) []access {
	var out []access
	for _, ns := range namespaces {
		for _, v := range strings.Fields(verbs) {
			out = append(out, access{v, group, resource, ns, ""})
		}
	}
	return out
}

// checkAccess asks east, as ServiceAccount ns/name, whether each of
// allowed is allowed and each of denied is not.
func checkAccess(t *testing.T, ns, name string, allowed, denied []access) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	client := saClient(t, env.Cluster("east"), ns, name)
	review := func(a access) bool {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.ns, Name: a.name,
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return r.Status.Allowed
	}
	// RBAC is read through an informer: wait for the bindings to count.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, a := range allowed {
			assert.True(c, review(a), "%s/%s may %s", ns, name, a)
		}
	}, wait, tick)
	for _, a := range denied {
		assert.False(t, review(a), "%s/%s may not %s", ns, name, a)
	}
	return client
}

// The ServiceAccounts may do what their components need and nothing
// else that matters.
func TestRBACRefuses(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	const links = "mcmirror-links"
	const disc = "discovery.k8s.io"
	const coord = "coordination.k8s.io"

	const mcs = "multicluster.x-k8s.io"
	allowed := slices.Concat(accesses("list watch create update patch delete", "", "services", "any-ns"),
		accesses("list watch", mcs, "serviceexports", "any-ns"),
		accesses("list create patch delete", mcs, "serviceimports", "any-ns"),
		accesses("get list watch create update delete", disc, "endpointslices", "any-ns"),
		accesses("list watch", "", "namespaces", ""), accesses("list watch", "", "secrets", links),
		[]access{
			{"create", "", "events", "default", ""}, {"patch", "", "events", "any-ns", ""},
			{"create", coord, "leases", "mcmirror", ""},
			{"get", coord, "leases", "mcmirror", "mcmirror-controller"},
			{"update", coord, "leases", "mcmirror", "mcmirror-controller"},
		})
	client := checkAccess(t, "mcmirror", "mcmirror-controller", allowed, []access{
		{"delete", "apps", "deployments", "default", ""},
		{"create", "", "pods", "default", ""},
		{"list", "", "secrets", "kube-system", ""},
		{"get", "", "secrets", "kube-system", "any"},
		{"list", "", "secrets", "", ""},
		{"list", "", "secrets", "mcmirror", ""},
		{"get", "", "secrets", links, "cluster-credentials-west"},
		{"create", "", "secrets", links, ""},
		{"create", "", "namespaces", "", ""},
		{"delete", "", "namespaces", "", "default"},
		{"deletecollection", "", "services", "default", ""},
		{"create", "multicluster.x-k8s.io", "serviceexports", "default", ""},
		{"update", "multicluster.x-k8s.io", "serviceexports", "default", ""},
		{"update", coord, "leases", "kube-system", "kube-controller-manager"},
		{"update", coord, "leases", "mcmirror", "someone-else"},
		{"delete", coord, "leases", "mcmirror", "mcmirror-controller"},
		{"list", "", "nodes", "", ""},
		{"create", "", "serviceaccounts/token", "mcmirror", "mcmirror-link"},
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""},
	})
	// And really refused, not only said to be.
	_, err := client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "list Secrets in kube-system: %v", err)
	err = client.AppsV1().Deployments("mcmirror").Delete(ctx, "mcmirror-controller", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "delete the Deployment: %v", err)

	client = checkAccess(t, "kube-system", "coredns", slices.Concat(accesses("list watch", "", "services", ""),
		accesses("list watch", disc, "endpointslices", ""), accesses("list watch", "", "namespaces", ""),
		accesses("list watch", "", "secrets", links)), []access{
		{"get", "", "secrets", links, "cluster-credentials-west"},
		{"list", "", "secrets", "kube-system", ""},
		{"list", "", "secrets", "", ""},
		{"create", "", "services", "default", ""},
		{"update", disc, "endpointslices", "default", ""},
		{"create", "", "secrets", links, ""},
		{"delete", "apps", "deployments", "kube-system", "coredns"},
	})
	_, err = client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "list Secrets in kube-system: %v", err)
}

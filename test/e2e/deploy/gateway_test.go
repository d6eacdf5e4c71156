package deploy_test

// deploy/gateway.yaml against a real API server: the Deployment and both
// Services are accepted and agree with each other and with the gateway's
// flags; the real `coredns-mc gateway`, run in east as the ServiceAccount
// the manifest binds, with the Deployment's arguments, syncs, becomes
// ready, accepts a destination east exports, serves the egress port of a
// mirror, and records its Events: the RBAC is sufficient; and that
// ServiceAccount is refused what the gateway does not need.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

const (
	gatewayNS   = "mcmirror"
	gatewayName = "mcmirror-gateway"
)

// gatewayDeployment is the Deployment of deploy/gateway.yaml.
func gatewayDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	return object[appsv1.Deployment](t, harness.RepoFile(t, "deploy", "gateway.yaml"),
		"Deployment", gatewayNS, gatewayName)
}

// gatewayPKI is a trust root with the certificates of east (the gateway
// under test) and west (its peer, and the client of its ingress).
type gatewayPKI struct {
	east, west gatewaytest.Files
}

func newGatewayPKI(t *testing.T) gatewayPKI {
	t.Helper()
	ca, err := gatewaytest.NewCA("mcmirror test root")
	require.NoError(t, err)
	dir := t.TempDir()
	var p gatewayPKI
	p.east, err = ca.IssueFiles(dir, "east", gatewaytest.Options{})
	require.NoError(t, err)
	p.west, err = ca.IssueFiles(dir, "west", gatewaytest.Options{})
	require.NoError(t, err)
	return p
}

func loadCerts(t *testing.T, f gatewaytest.Files) *gateway.Certs {
	t.Helper()
	c, err := gateway.LoadCerts(gateway.CertFiles{Cert: f.Cert, Key: f.Key, CA: f.CA})
	require.NoError(t, err)
	return c
}

// fakePeer stands for west's gateway as far as east's prober sees it: an
// mTLS listener with west's certificate that answers every request with
// 200 while up and 503 while down.
type fakePeer struct {
	addr string
	up   atomic.Bool
}

func startFakePeer(t *testing.T, f gatewaytest.Files) *fakePeer {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", loadCerts(t, f).ServerConfig())
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &fakePeer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				st := http.StatusServiceUnavailable
				if p.up.Load() {
					st = http.StatusOK
				}
				fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", st, http.StatusText(st))
			}()
		}
	}()
	return p
}

// gatewayProc is a running `coredns-mc gateway`.
type gatewayProc struct {
	proc             *harness.Process
	ingress, metrics string // host:port
	pod              string // $POD_NAME, which its Events are about
}

// startGateway runs `coredns-mc gateway` in east exactly as the Deployment
// of deploy/gateway.yaml runs it (its arguments, its environment, its
// ServiceAccount), except for what only makes sense in a pod: the
// in-cluster configuration becomes a kubeconfig of the same ServiceAccount,
// the mounted Secret becomes the files of pki.east, the listeners move to
// free loopback ports, and the one --peer (west) is peer. Probes run every
// 200 ms instead of 2 s, so that Events come quickly. extraEnv is added to
// its environment.
func startGateway(t *testing.T, pki gatewayPKI, peer string, extraEnv ...string) *gatewayProc {
	t.Helper()
	d := gatewayDeployment(t)
	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	p := &gatewayProc{
		ingress: "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)),
		metrics: "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)),
		pod:     harness.UniqueName(gatewayName),
	}
	name, _, _ := strings.Cut(flagValue(t, ctr.Args, "peer"), "=")
	require.Equal(t, "west", name, "the Deployment's --peer")
	argv := localArgv(t, ctr, map[string]string{
		"--tls-cert": "", "--tls-key": "", "--tls-ca": "", // pki.east's files, below
		"--ingress-address": p.ingress, "--metrics-addr": p.metrics, "--peer": "west=" + peer,
	})
	argv = append(argv, pki.east.Args()...)
	argv = append(argv,
		"--kubeconfig="+accountKubeconfig(t, env.Cluster("east"), d.Namespace, spec.ServiceAccountName),
		// The egress ports of every mirror in east, on loopback only.
		"--egress-bind-address=127.0.0.1",
		"--probe-interval=200ms", "--probe-timeout=1s")
	// $POD_NAME, $POD_NAMESPACE and $GOMEMLIMIT, as the downward API
	// fills them in.
	var procEnv []string
	for _, e := range ctr.Env {
		require.NotNil(t, e.ValueFrom, e.Name)
		if r := e.ValueFrom.ResourceFieldRef; r != nil {
			require.Equal(t, "limits.memory", r.Resource, e.Name)
			procEnv = append(procEnv, e.Name+"="+strconv.FormatInt(ctr.Resources.Limits.Memory().Value(), 10))
			continue
		}
		require.NotNil(t, e.ValueFrom.FieldRef, e.Name)
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.name":
			procEnv = append(procEnv, e.Name+"="+p.pod)
		case "metadata.namespace":
			procEnv = append(procEnv, e.Name+"="+d.Namespace)
		default:
			t.Fatalf("env %s from %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
		}
	}
	p.proc = env.StartProcess(t, "east/"+gatewayName, append(procEnv, extraEnv...), argv...)
	// The Deployment's probes: liveness, then readiness.
	for _, probe := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		waitProbe(t, p.proc, p.metrics, probe)
	}
	return p
}

// connect asks the ingress at addr, with certs (another cluster's
// gateway), for authority. It returns the answer's status and, on 200,
// what the target said first and what it echoed of "ping\n".
func connect(certs *gateway.Certs, addr, authority string) (status int, greeting, echo string, err error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, certs.ClientConfig("east", nil))
	if err != nil {
		return 0, "", "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", authority); err != nil {
		return 0, "", "", err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "", "", nil
	}
	if greeting, err = br.ReadString('\n'); err != nil {
		return resp.StatusCode, greeting, "", err
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		return resp.StatusCode, greeting, "", err
	}
	echo, err = br.ReadString('\n')
	return resp.StatusCode, greeting, echo, err
}

// ---- tests ---------------------------------------------------------------

// deploy/gateway.yaml is accepted as it is, and its parts agree: the flags,
// the ports, the probes, the Services' selectors, the certificate volume,
// the namespaces of the RBAC, and the cluster name of controller.yaml.
func TestGatewayManifest(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	text := harness.RepoFile(t, "deploy", "gateway.yaml")
	require.NoError(t, east.Apply(ctx, text))

	d := gatewayDeployment(t)
	got, err := east.Client.AppsV1().Deployments(gatewayNS).Get(ctx, gatewayName, metav1.GetOptions{})
	require.NoError(t, err, "the API server took the Deployment")
	assert.GreaterOrEqual(t, *got.Spec.Replicas, int32(2), "more than one replica: the controller follows every ready pod of the egress Service")

	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	assert.Equal(t, controllerDeployment(t).Spec.Template.Spec.Containers[0].Image, ctr.Image, "the controller's image")
	assert.Equal(t, "gateway", ctr.Args[0])
	assert.Equal(t, flagValue(t, controllerDeployment(t).Spec.Template.Spec.Containers[0].Args, "cluster"),
		flagValue(t, ctr.Args, "cluster"), "the controller's --cluster")
	assert.Equal(t, gatewayName, spec.ServiceAccountName)
	assertHardened(t, spec)
	assert.NotEmpty(t, ctr.Resources.Requests)

	// Ports: the container's are the flags', and the probes use them.
	ports := map[string]corev1.ContainerPort{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p
	}
	for name, flag := range map[string]string{"ingress": "ingress-address", "metrics": "metrics-addr"} {
		_, port, err := net.SplitHostPort(flagValue(t, ctr.Args, flag))
		require.NoError(t, err)
		assert.Equal(t, port, strconv.Itoa(int(ports[name].ContainerPort)), "port %s is --%s's", name, flag)
	}
	assert.Equal(t, int32(4143), ports["ingress"].ContainerPort)
	assert.Equal(t, int32(9155), ports["metrics"].ContainerPort)
	for path, p := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
		require.NotNil(t, p)
		require.NotNil(t, p.HTTPGet)
		assert.Equal(t, path, p.HTTPGet.Path)
		assert.Equal(t, "metrics", p.HTTPGet.Port.String())
	}
	// No --peer names this cluster, and each is NAME=HOST:PORT.
	for _, a := range ctr.Args {
		if v, ok := strings.CutPrefix(a, "--peer="); ok {
			name, addr, ok := strings.Cut(v, "=")
			require.True(t, ok, a)
			assert.NotEqual(t, flagValue(t, ctr.Args, "cluster"), name)
			_, _, err := net.SplitHostPort(addr)
			assert.NoError(t, err, a)
		}
	}

	// The certificate files are those of one read-only Secret volume.
	require.Len(t, ctr.VolumeMounts, 1)
	mount := ctr.VolumeMounts[0]
	assert.True(t, mount.ReadOnly)
	for _, f := range []string{"tls-cert", "tls-key", "tls-ca"} {
		assert.Equal(t, mount.MountPath, path.Dir(flagValue(t, ctr.Args, f)), "--%s is in the Secret volume", f)
	}
	require.Len(t, spec.Volumes, 1)
	assert.Equal(t, mount.Name, spec.Volumes[0].Name)
	require.NotNil(t, spec.Volumes[0].Secret)
	assert.Equal(t, "mcmirror-gateway-tls", spec.Volumes[0].Secret.SecretName)

	// The ingress Service: a LoadBalancer with one TCP port, 4143, to the
	// container's ingress port, selecting the gateway's pods.
	podLabels := k8slabels.Set(d.Spec.Template.Labels)
	in, err := east.Client.CoreV1().Services(gatewayNS).Get(ctx, gatewayName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ServiceTypeLoadBalancer, in.Spec.Type)
	require.Len(t, in.Spec.Ports, 1)
	assert.Equal(t, int32(4143), in.Spec.Ports[0].Port)
	assert.Equal(t, corev1.ProtocolTCP, in.Spec.Ports[0].Protocol)
	assert.Equal(t, "ingress", in.Spec.Ports[0].TargetPort.String())
	assert.True(t, k8slabels.SelectorFromSet(in.Spec.Selector).Matches(podLabels), "the ingress Service selects the gateway")
	assert.True(t, k8slabels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels))
	// The egress Service: headless (its EndpointSlice names the pods' IPs,
	// where the controller's --egress-service points the mirrors),
	// selecting the gateway's pods.
	eg, err := east.Client.CoreV1().Services(gatewayNS).Get(ctx, gatewayName+"-egress", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClusterIPNone, eg.Spec.ClusterIP)
	assert.True(t, k8slabels.SelectorFromSet(eg.Spec.Selector).Matches(podLabels), "the egress Service selects the gateway")
	// The metrics Service: a ClusterIP with one TCP port, 9155, to the
	// container's metrics port (/peers, which the DNS's gateway_health
	// reads at this ClusterIP, and /metrics), selecting the gateway's pods.
	ms, err := east.Client.CoreV1().Services(gatewayNS).Get(ctx, gatewayName+"-metrics", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ServiceTypeClusterIP, ms.Spec.Type)
	assert.NotEqual(t, corev1.ClusterIPNone, ms.Spec.ClusterIP)
	require.Len(t, ms.Spec.Ports, 1)
	assert.Equal(t, int32(9155), ms.Spec.Ports[0].Port)
	assert.Equal(t, corev1.ProtocolTCP, ms.Spec.Ports[0].Protocol)
	assert.Equal(t, "metrics", ms.Spec.Ports[0].TargetPort.String())
	assert.True(t, k8slabels.SelectorFromSet(ms.Spec.Selector).Matches(podLabels), "the metrics Service selects the gateway")
	// One gateway pod at a time may be evicted.
	pdb, err := east.Client.PolicyV1().PodDisruptionBudgets(gatewayNS).Get(ctx, gatewayName, metav1.GetOptions{})
	require.NoError(t, err)
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, pdbSel.Matches(podLabels), "the PodDisruptionBudget covers the gateway's pods")

	// RBAC: read-only cluster-wide; Events only in the pod's namespace.
	for _, r := range object[rbacv1.ClusterRole](t, text, "ClusterRole", "", gatewayName).Rules {
		assert.Equal(t, []string{"list", "watch"}, r.Verbs, "cluster-wide, the gateway only reads: %v", r)
	}
	object[rbacv1.Role](t, text, "Role", d.Namespace, gatewayName+"-events")
	for _, name := range []string{"POD_NAME", "POD_NAMESPACE"} {
		i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		require.GreaterOrEqual(t, i, 0, "env %s", name)
	}
}

// The real gateway, run as deploy/gateway.yaml's ServiceAccount with only
// that file's RBAC and the Deployment's arguments, does its whole job
// against east's API server: it syncs and is ready, accepts a destination
// that east exports once it is exported (its informers on Services and
// EndpointSlices list and watch), serves the egress port of a mirror
// Service made after it started, and records PeerGatewayDown, then
// PeerGatewayUp, then PeerGatewayDown again (the same Event, patched) as
// its peer goes down, up and down. Nothing it tries is forbidden.
//
// It runs twice. client-go's informers stream their initial list over a
// watch (WatchListClient) where the API server supports it, as this one
// does; elsewhere they list and then watch, which the second run forces.
// The role must serve both, and each run fails without one of its rules.
func TestGatewayRBACSuffices(t *testing.T) {
	for _, mode := range []struct {
		name, ns string
		env      []string
	}{
		{"watch-list", "deploy-gw", nil},
		{"list-then-watch", "deploy-gw-list", []string{"KUBE_FEATURE_WatchListClient=false"}},
	} {
		t.Run(mode.name, func(t *testing.T) { gatewaySuffices(t, mode.ns, mode.env...) })
	}
}

func gatewaySuffices(t *testing.T, ns string, extraEnv ...string) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	require.NoError(t, east.Apply(ctx, harness.RepoFile(t, "deploy", "gateway.yaml")))
	pki := newGatewayPKI(t)
	peer := startFakePeer(t, pki.west) // down: answers 503
	gw := startGateway(t, pki, peer.addr, extraEnv...)
	west := loadCerts(t, pki.west)

	// An exported Service of east, made once the gateway is ready: a real
	// server in a network namespace, at an EndpointSlice address (east
	// runs no EndpointSlice controller, so the slice is written here as
	// it would write it: with the Service's labels).
	env.TempNamespace(t, ns, east)
	pod := east.RunPod(t, "web-0", harness.EchoServer(8080))
	exported := fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %[1]s, labels: {%[2]s: %[3]q}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-gw, namespace: %[1]s, labels: {%[4]s: web, %[2]s: %[3]q, endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [%[5]q], conditions: {ready: true}, targetRef: {kind: Pod, namespace: %[1]s, name: web-0}}]
`, ns, labels.Exported, labels.ExportGateway, discoveryv1.LabelServiceName, pod.IP)
	status, _, _, err := connect(west, gw.ingress, "web."+ns+":80")
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, status, "not exported yet")
	require.NoError(t, east.Apply(ctx, exported))
	t.Cleanup(func() { _ = east.Delete(context.Background(), exported) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, greeting, echo, err := connect(west, gw.ingress, "web."+ns+":80")
		require.NoError(c, err)
		require.Equal(c, http.StatusOK, status)
		assert.Equal(c, "hello from east/web-0\n", greeting)
		assert.Equal(c, "ping\n", echo)
	}, wait, tick, "the ingress accepts web.%s:80 and reaches its endpoint", ns)

	// A mirror Service, as the controller writes it, recording an egress
	// port: the egress listens on it.
	egressPort := freePortInRange(t, 30000, 32767) // the Deployment's --egress-ports
	egressAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(egressPort))
	if c, err := net.Dial("tcp", egressAddr); err == nil {
		c.Close()
		t.Fatalf("%s answers before any mirror records it", egressAddr)
	}
	mirror := fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: web-west
  namespace: %s
  labels: {%q: %q, %q: %q, %q: west, %q: web}
  annotations: {%q: "80/TCP=%d"}
spec:
  ports: [{name: http, port: 80}]
`, ns, labels.ManagedBy, labels.ManagedByValue, labels.MirroredService, labels.MirroredServiceValue,
		labels.ClusterName, labels.RemoteService, labels.EgressPorts, egressPort)
	require.NoError(t, east.Apply(ctx, mirror))
	t.Cleanup(func() { _ = east.Delete(context.Background(), mirror) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conn, err := net.Dial("tcp", egressAddr)
		require.NoError(c, err)
		conn.Close()
	}, wait, tick, "the egress listens on the mirror's port %d", egressPort)

	// Events on the gateway's Pod: down (created), up, down again (the
	// same Event, patched: count 2).
	waitEvent := func(reason string, count int32) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			list, err := east.Client.CoreV1().Events(gatewayNS).List(ctx, metav1.ListOptions{})
			require.NoError(c, err)
			evs := slices.DeleteFunc(list.Items, func(e corev1.Event) bool {
				return e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != gw.pod || e.Reason != reason
			})
			require.Len(c, evs, 1)
			assert.Equal(c, count, evs[0].Count)
			assert.Contains(c, evs[0].Message, "cluster west")
		}, wait, tick, "Event %s with count %d on Pod %s/%s", reason, count, gatewayNS, gw.pod)
	}
	waitEvent("PeerGatewayDown", 1)
	peer.up.Store(true)
	waitEvent("PeerGatewayUp", 1)
	peer.up.Store(false)
	waitEvent("PeerGatewayDown", 2)

	assert.NotContains(t, strings.ToLower(gw.proc.Log(t)), "forbidden", "every call of the gateway was allowed")
}

// The gateway's ServiceAccount may read Services and EndpointSlices and
// record Events in its namespace, and nothing else that matters: it cannot
// read Secrets (its own certificate's included), write Services or
// EndpointSlices, or see Pods.
func TestGatewayRBACRefuses(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	require.NoError(t, env.Cluster("east").Apply(ctx, harness.RepoFile(t, "deploy", "gateway.yaml")))
	const disc = "discovery.k8s.io"
	allowed := slices.Concat(accesses("list watch", "", "services", "", "any-ns"),
		accesses("list watch", disc, "endpointslices", ""), accesses("create patch", "", "events", gatewayNS))
	denied := []access{
		{"get", "", "services", "default", "kubernetes"},
		{"get", disc, "endpointslices", "default", "kubernetes"},
		{"list", "", "secrets", "", ""},
		{"list", "", "secrets", gatewayNS, ""},
		{"get", "", "secrets", gatewayNS, "mcmirror-gateway-tls"},
		{"watch", "", "secrets", "mcmirror-links", ""},
		{"list", "", "pods", "", ""},
		{"list", "", "pods", gatewayNS, ""},
		{"get", "", "pods", gatewayNS, "any"},
		{"list", "", "endpoints", "", ""},
		{"list", "", "namespaces", "", ""},
		{"list", "", "nodes", "", ""},
		{"list", "", "configmaps", gatewayNS, ""},
		{"create", "", "events", "default", ""},
		{"create", "", "events", "kube-system", ""},
		{"delete", "", "events", gatewayNS, ""},
		{"create", "", "serviceaccounts/token", gatewayNS, gatewayName},
		{"update", "coordination.k8s.io", "leases", "kube-system", "kube-controller-manager"},
		{"delete", "apps", "deployments", gatewayNS, gatewayName},
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""},
	}
	const writes = "create update patch delete deletecollection"
	denied = slices.Concat(denied, accesses(writes, "", "services", "default"),
		accesses(writes, disc, "endpointslices", "default"))
	client := checkAccess(t, gatewayNS, gatewayName, allowed, denied)

	// And really refused by the API server, not only said to be.
	for _, act := range slices.Concat(only(secretReads(""), "list Secrets in every namespace"),
		only(serviceWrites("default"), "create a Service", "delete a Service", "create an EndpointSlice"),
		only(otherReads(gatewayNS), "list Pods"), []action{eventCreate("default"),
			{"get its certificate Secret", func(ctx context.Context, c kubernetes.Interface) error {
				return errOf(c.CoreV1().Secrets(gatewayNS).Get(ctx, "mcmirror-gateway-tls", metav1.GetOptions{}))
			}}}) {
		err := act.do(ctx, client)
		assert.True(t, apierrors.IsForbidden(err), "%s: want 403, got %v", act.what, err)
	}
	// What it may do, it can.
	_, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "list Services")
}

// The egress wiring of deploy/controller.yaml and deploy/gateway.yaml, in
// west, which runs pods (KWOK): the controller's --egress-service names
// gateway.yaml's headless egress Service, whose EndpointSlice, selected as
// the controller selects it, gives the gateway pod's IP once it is ready:
// the address the mirrors point at, with no recipe to run.
func TestGatewayEgressService(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")

	svc, err := controller.ParseEgressService(flagValue(t, controllerDeployment(t).Spec.Template.Spec.Containers[0].Args, "egress-service"))
	require.NoError(t, err)
	assert.Equal(t, gatewayNS, svc.Namespace)
	assert.Equal(t, gatewayName+"-egress", svc.Name)
	eg := object[corev1.Service](t, harness.RepoFile(t, "deploy", "gateway.yaml"),
		"Service", svc.Namespace, svc.Name)
	assert.Equal(t, corev1.ClusterIPNone, eg.Spec.ClusterIP, "headless: its endpoints are the pods' IPs")
	assert.True(t, k8slabels.SelectorFromSet(eg.Spec.Selector).Matches(k8slabels.Set(gatewayDeployment(t).Spec.Template.Labels)))

	// No scheduler here: the pod template names KWOK's node.
	gw := harness.RepoFile(t, "deploy", "gateway.yaml")
	const sa = "      serviceAccountName: " + gatewayName + "\n"
	require.Equal(t, 1, strings.Count(gw, sa))
	gw = strings.Replace(gw, sa, sa+"      nodeName: "+harness.NodeName+"\n", 1)
	require.NoError(t, west.Apply(ctx, gw))
	t.Cleanup(func() {
		_ = west.Client.AppsV1().Deployments(gatewayNS).Delete(context.Background(), gatewayName, metav1.DeleteOptions{})
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := west.Client.CoreV1().Pods(gatewayNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + gatewayName})
		require.NoError(c, err)
		require.Len(c, pods.Items, int(*gatewayDeployment(t).Spec.Replicas))
		var podIPs []string
		for _, p := range pods.Items {
			require.NotEmpty(c, p.Status.PodIP)
			podIPs = append(podIPs, p.Status.PodIP)
		}
		slices.Sort(podIPs)
		esl, err := west.Client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		require.NoError(c, err)
		var slicePtrs []*discoveryv1.EndpointSlice
		for i := range esl.Items {
			slicePtrs = append(slicePtrs, &esl.Items[i])
		}
		var got []string
		for _, a := range controller.EgressAddresses(svc.Namespace, svc.Name, slicePtrs) {
			got = append(got, a.String())
		}
		slices.Sort(got) // as strings, like podIPs
		assert.Equal(c, podIPs, got, "the controller's egress addresses are every gateway pod's")
	}, wait, tick)
}

// freePortInRange returns a TCP port of [lo, hi] free on 127.0.0.1 a
// moment ago: the gateway ignores a mirror's claim of a port outside its
// --egress-ports.
func freePortInRange(t *testing.T, lo, hi int) int {
	t.Helper()
	start := lo + int(time.Now().UnixNano()%int64(hi-lo+1))
	for i := 0; i <= hi-lo; i++ {
		port := lo + (start-lo+i)%(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatalf("no free port in %d-%d", lo, hi)
	return 0
}

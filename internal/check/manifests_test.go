package check

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// manifests holds the objects of deploy/*.yaml, as check reads the
// cluster they are applied to.
type manifests struct {
	deployments  map[string]*appsv1.Deployment // namespace/name
	configMaps   map[string]*corev1.ConfigMap
	roles        map[string]*rbacv1.Role // namespace/name
	clusterRoles map[string]*rbacv1.ClusterRole
	bindings     []*rbacv1.RoleBinding
	clusterBinds []*rbacv1.ClusterRoleBinding
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{deployments: map[string]*appsv1.Deployment{}, configMaps: map[string]*corev1.ConfigMap{},
		roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}}
	for _, f := range []string{"controller.yaml", "gateway.yaml", "coredns.yaml", "remote-link.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "deploy", f))
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			err := dec.Decode(&u.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			if len(u.Object) == 0 {
				continue
			}
			key := u.GetNamespace() + "/" + u.GetName()
			var into any
			switch u.GetKind() {
			case "Deployment":
				d := &appsv1.Deployment{}
				m.deployments[key], into = d, d
			case "ConfigMap":
				c := &corev1.ConfigMap{}
				m.configMaps[key], into = c, c
			case "Role":
				r := &rbacv1.Role{}
				m.roles[key], into = r, r
			case "ClusterRole":
				r := &rbacv1.ClusterRole{}
				m.clusterRoles[u.GetName()], into = r, r
			case "RoleBinding":
				b := &rbacv1.RoleBinding{}
				m.bindings, into = append(m.bindings, b), b
			case "ClusterRoleBinding":
				b := &rbacv1.ClusterRoleBinding{}
				m.clusterBinds, into = append(m.clusterBinds, b), b
			default:
				continue
			}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into), "%s %s", f, key)
		}
	}
	return m
}

// install is what check reads of a cluster where deploy/*.yaml is applied
// and the DNS patched.
func (m *manifests) install(t *testing.T) Install {
	t.Helper()
	var in Install
	for _, k := range []struct {
		into *Workload
		key  string
	}{{&in.Controller, "mcmirror/mcmirror-controller"}, {&in.Gateway, "mcmirror/mcmirror-gateway"}} {
		d, ok := m.deployments[k.key]
		require.True(t, ok, "deploy/ has Deployment %s", k.key)
		*k.into = WorkloadOf(d)
	}
	cm, ok := m.configMaps["kube-system/coredns-mcmirror"]
	require.True(t, ok, "deploy/coredns.yaml has ConfigMap kube-system/coredns-mcmirror")
	in.DNS = Workload{Namespace: "kube-system", Name: "coredns", Found: true, ServiceAccount: "coredns", Image: in.Controller.Image}
	in.Corefile, in.CorefileFrom = cm.Data["Corefile"], "ConfigMap kube-system/coredns-mcmirror, key Corefile"
	in.LinkServiceAccount = true
	return in
}

// rule is one verb on one resource that a ServiceAccount is granted, in a
// namespace ("" cluster-wide) and for a name ("" any).
type rule struct{ verb, group, resource, ns, name string }

// granted lists what the manifests grant ServiceAccount ns/name.
func (m *manifests) granted(ns, name string) []rule {
	var out []rule
	subject := func(ss []rbacv1.Subject) bool {
		return slices.ContainsFunc(ss, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Namespace == ns && s.Name == name
		})
	}
	expand := func(prs []rbacv1.PolicyRule, scope string) {
		for _, pr := range prs {
			names := pr.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range pr.APIGroups {
				for _, r := range pr.Resources {
					for _, v := range pr.Verbs {
						for _, n := range names {
							out = append(out, rule{v, g, r, scope, n})
						}
					}
				}
			}
		}
	}
	for _, b := range m.clusterBinds {
		if cr, ok := m.clusterRoles[b.RoleRef.Name]; ok && subject(b.Subjects) {
			expand(cr.Rules, "")
		}
	}
	for _, b := range m.bindings {
		if !subject(b.Subjects) {
			continue
		}
		if b.RoleRef.Kind == "ClusterRole" {
			if cr, ok := m.clusterRoles[b.RoleRef.Name]; ok {
				expand(cr.Rules, b.Namespace)
			}
		} else if r, ok := m.roles[b.Namespace+"/"+b.RoleRef.Name]; ok {
			expand(r.Rules, b.Namespace)
		}
	}
	return out
}

// needRules are the needs of access as rules.
func needRules(access []Access) []rule {
	out := make([]rule, len(access))
	for i, a := range access {
		n := a.Need
		out[i] = rule{n.Verb, n.Group, n.Resource, n.Namespace, n.Name}
	}
	return out
}

// What check reviews for each ServiceAccount is exactly what the manifests
// grant it: a permission the code needs and the file lacks fails here, and
// so does a rule of the files that check does not know the use of.
func TestNeedsAreTheManifestsRules(t *testing.T) {
	m := loadManifests(t)
	in := m.install(t)
	plan := PlanRBAC(in, 1, 1)
	require.Len(t, plan, 4)
	for _, f := range plan {
		require.True(t, f.Installed, "%s: %s", f.Component, f.Why)
		got, want := needRules(f.Access), m.granted(f.Namespace, f.ServiceAccount)
		assert.ElementsMatch(t, want, got, "ServiceAccount %s/%s (%s): the manifests' rules and check's needs", f.Namespace, f.ServiceAccount, f.Component)
	}
}

// The manifests read back: the configuration check takes from the
// Deployments and the Corefile is the one they hold.
func TestInstallOfManifests(t *testing.T) {
	m := loadManifests(t)
	in := m.install(t)

	ctl := ParseController(in.Controller.Args)
	assert.Equal(t, "east", ctl.Cluster)
	assert.Equal(t, "mcmirror-links", ctl.LinkSecretsNamespace())
	assert.True(t, ctl.LeaderElect)
	assert.Equal(t, "mcmirror", ctl.LeaseNamespace)
	assert.Equal(t, "mcmirror-controller", ctl.LeaseName)
	assert.NotEmpty(t, ctl.EgressPorts)
	assert.Equal(t, "mcmirror-controller", in.Controller.ServiceAccount)
	_, err := ctl.Complete()
	assert.NoError(t, err, "the controller starts with these arguments")

	gw := ParseGateway(in.Gateway.Args)
	assert.Equal(t, "east", gw.Cluster)
	assert.Equal(t, []string{"west"}, gw.PeerOrder)
	assert.Contains(t, gw.Peers["west"], ":4143")
	assert.Equal(t, ctl.EgressPorts, gw.EgressPorts)
	assert.Equal(t, ":9155", gw.MetricsAddress)
	assert.Equal(t, "mcmirror.dev", gw.TrustDomain)
	secret, key, ok := in.Gateway.CASecret(gw.CAFile)
	require.True(t, ok, "--tls-ca %s is a file of a Secret volume", gw.CAFile)
	assert.Equal(t, "mcmirror-gateway-tls", secret)
	assert.Equal(t, "ca.crt", key)
	assert.True(t, in.Gateway.Env["POD_NAME"])
	_, err = gw.Complete()
	assert.NoError(t, err, "the gateway starts with these arguments")

	d := ParseCorefile(in.Corefile)
	assert.True(t, d.Mcmirror)
	assert.True(t, d.Kubernetes)
	assert.Equal(t, "east", d.Cluster)
	assert.Equal(t, "mcmirror-links", d.LinkNamespace)
	assert.Equal(t, "cluster.local", d.Domain())

	assert.Equal(t, OK, evalClusterName(in).Status, evalClusterName(in).Message)
	assert.Equal(t, OK, evalVersions(in).Status, evalVersions(in).Message)
}

// The cluster DNS's Corefile is found where kubeadm's Deployment mounts it.
func TestCorefileSource(t *testing.T) {
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = "kube-system", "coredns"
	d.Spec.Template.Spec.Containers = []corev1.Container{{
		Name: "coredns", Args: []string{"-conf", "/etc/coredns/Corefile"},
		VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns"}},
	}}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns-mcmirror"},
			Items: []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}}}}}
	cm, key, ok := corefileSource(WorkloadOf(d))
	require.True(t, ok)
	assert.Equal(t, "coredns-mcmirror", cm)
	assert.Equal(t, "Corefile", key)

	d.Spec.Template.Spec.Containers[0].Args = []string{"-conf=/etc/other/Corefile"}
	_, _, ok = corefileSource(WorkloadOf(d))
	assert.False(t, ok, "nothing mounted at /etc/other")
}

func TestParseCorefile(t *testing.T) {
	d := ParseCorefile(`
# a comment: mcmirror cluster.local { cluster nope }
.:53 {
    errors
    health {
        lameduck 5s
    }
    mcmirror example.org in-addr.arpa {
        cluster west   # the name
        link_secrets linked/app=x
        allow_insecure_kubeconfig exec files
        ttl 5
    }
    forward . /etc/resolv.conf
}
`)
	assert.True(t, d.Mcmirror)
	assert.False(t, d.Kubernetes)
	assert.Equal(t, "west", d.Cluster)
	assert.Equal(t, "linked", d.LinkNamespace)
	assert.True(t, d.Allow.Exec)
	assert.True(t, d.Allow.Files)
	assert.False(t, d.Allow.HTTP)
	assert.Equal(t, "example.org", d.Domain())

	assert.False(t, ParseCorefile(".:53 {\n    kubernetes cluster.local\n}\n").Mcmirror)
}

package link_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The walk of an operator: link west from east with the printed Secret,
// see west's export mirrored in east, then unlink, and see both sides and
// the mirrors go, and the credentials stop working.
func TestLinkUnlink(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	cleanLinks(t, west)
	const ns = "e2e-link"
	env.CreateNamespace(t, ns, east, west)
	env.CreateNamespace(t, grant.DefaultLinkNamespace, east)

	r := mustRun(t, "link", "--cluster", "west", "--kubeconfig", west.Kubeconfig)
	secret := decodeSecret(t, r.stdout)
	assert.Equal(t, "cluster-credentials-west", secret.Name)
	assert.Equal(t, grant.DefaultLinkNamespace, secret.Namespace)
	assert.Equal(t, corev1.SecretType(labels.LinkSecretType), secret.Type)
	assert.Equal(t, "west", secret.Labels[labels.LinkClusterName])
	require.NoError(t, east.Apply(ctx, r.stdout), "the printed YAML is what kubectl apply -f - takes")

	// East's DNS and controller follow the link Secrets, as deploy/ runs
	// them.
	dnsServer := env.StartFleet(t, harness.FleetOptions{Local: "east", LinkSecrets: grant.DefaultLinkNamespace,
		Parts: harness.FleetDNS | harness.FleetController, Controller: harness.ControllerOptions{Args: []string{"--link-removal-grace", "1s"}}}).DNS
	name := "nginx-svc-west." + ns + ".svc.cluster.local."
	require.NoError(t, west.Apply(ctx, harness.StatefulSet(ns, "nginx-svc", "nginx-set", 2, map[string]string{labels.Exported: labels.ExportGateway})))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := env.Cluster("east").Mirrors(ctx, ns)
		require.NoError(c, err)
		assert.ElementsMatch(c, []string{"nginx-svc-west", "nginx-set-0-west", "nginx-set-1-west"},
			slices.Collect(maps.Keys(m)))
	}, wait, tick, "west's export mirrored in east through the printed link")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := dnsServer.Ask(c, "udp", name, dns.TypeA)
		assert.Equal(c, dns.RcodeSuccess, r.Rcode)
		assert.Len(c, r.Answer, 2, "one mirror ClusterIP per pod of west")
	}, wait, tick, "and answered by the DNS through the same link")

	link := linkClient(t, secret)
	assertLinkAccess(t, ctx, link, ns)

	r = mustRun(t, "unlink", "--cluster", "west", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig)
	unlinked := time.Now()
	assert.Empty(t, r.stdout, "applied, not printed")
	_, err := east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, secret.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "link Secret in east: %v", err)
	assertGone(t, ctx, west)
	_, err = west.Client.CoreV1().Secrets(grant.DefaultNamespace).Get(ctx, grant.TokenPrefix, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "token Secret in west: %v", err)

	// The controller drops the link and sweeps its mirrors.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := env.Cluster("east").Mirrors(ctx, ns)
		require.NoError(c, err)
		assert.Empty(c, m)
	}, wait, tick, "the mirrors of west go with the link")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, dns.RcodeNameError, dnsServer.Ask(c, "udp", name, dns.TypeA).Rcode)
	}, wait, tick, "and the DNS drops the link")
	requireRevoked(t, ctx, link, "old token")
	t.Logf("old token refused %s after unlink returned", time.Since(unlinked).Round(time.Millisecond))
}

// requireRevoked waits until the API server refuses link's token, whose
// Secret is gone: it may accept it a few seconds more, from its cache of
// recent authentications.
func requireRevoked(t *testing.T, ctx context.Context, link kubernetes.Interface, token string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := link.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		assert.True(c, apierrors.IsUnauthorized(err), "%s: %v", token, err)
	}, wait, tick)
}

// assertLinkAccess proves, with the real API server, that the link's
// credentials read what a link reads and nothing else (issue: least
// privilege): no Secret, no write, no read by name, no token minting.
func assertLinkAccess(t *testing.T, ctx context.Context, link kubernetes.Interface, ns string) {
	t.Helper()
	west := env.Cluster("west")
	svcs, err := link.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "list Services")
	assert.NotEmpty(t, svcs.Items)
	_, err = link.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "list EndpointSlices")
	w, err := link.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err, "watch Services")
	w.Stop()
	w, err = link.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err, "watch EndpointSlices")
	w.Stop()

	svc, err := west.Client.CoreV1().Services(ns).Get(ctx, "nginx-svc", metav1.GetOptions{})
	require.NoError(t, err)
	slices, err := west.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, slices.Items)
	edited := svc.DeepCopy()
	edited.Labels["edited"] = "yes"
	expiry := int64(3600)
	for what, call := range map[string]func() error{
		"get a Secret": func() error { return errOf(link.CoreV1().Secrets("kube-system").Get(ctx, "any", metav1.GetOptions{})) },
		"list Secrets": func() error { _, err := link.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err },
		"list its own token": func() error {
			return errOf(link.CoreV1().Secrets(grant.DefaultNamespace).List(ctx, metav1.ListOptions{}))
		},
		"watch Secrets":         func() error { _, err := link.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{}); return err },
		"get a Service by name": func() error { _, err := link.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); return err },
		"create a Service": func() error {
			return errOf(link.CoreV1().Services(ns).Create(ctx, newService(ns), metav1.CreateOptions{}))
		},
		"update a Service": func() error { return errOf(link.CoreV1().Services(ns).Update(ctx, edited, metav1.UpdateOptions{})) },
		"patch a Service":  func() error { return patchLabel(ctx, link, ns, svc.Name) },
		"delete a Service": func() error { return link.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}) },
		"delete EndpointSlices": func() error {
			return link.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		},
		"create an EndpointSlice": func() error {
			return errOf(link.DiscoveryV1().EndpointSlices(ns).Create(ctx, newSlice(ns), metav1.CreateOptions{}))
		},
		"delete an EndpointSlice": func() error {
			return link.DiscoveryV1().EndpointSlices(ns).Delete(ctx, slices.Items[0].Name, metav1.DeleteOptions{})
		},
		"get an EndpointSlice": func() error {
			return errOf(link.DiscoveryV1().EndpointSlices(ns).Get(ctx, slices.Items[0].Name, metav1.GetOptions{}))
		},
		"list Pods":            func() error { _, err := link.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
		"list ConfigMaps":      func() error { _, err := link.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); return err },
		"list Namespaces":      func() error { _, err := link.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); return err },
		"list Nodes":           func() error { _, err := link.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"list Endpoints":       func() error { _, err := link.CoreV1().Endpoints("").List(ctx, metav1.ListOptions{}); return err },
		"create a Pod":         func() error { return errOf(link.CoreV1().Pods(ns).Create(ctx, newPod(ns), metav1.CreateOptions{})) },
		"list ServiceAccounts": func() error { _, err := link.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{}); return err },
		"list ClusterRoles":    func() error { _, err := link.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}); return err },
		"create a ClusterRoleBinding": func() error {
			return errOf(link.RbacV1().ClusterRoleBindings().Create(ctx, newAdminBinding(), metav1.CreateOptions{}))
		},
		"mint a token of itself": func() error {
			_, err := link.CoreV1().ServiceAccounts(grant.DefaultNamespace).CreateToken(ctx, grant.ServiceAccount,
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
			return err
		},
	} {
		err := call()
		assert.True(t, apierrors.IsForbidden(err), "%s: want 403 Forbidden, got %v", what, err)
	}
	// Nothing changed.
	now, err := west.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, svc.ResourceVersion, now.ResourceVersion)
}

func newService(ns string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
}

func newSlice(ns string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "intruder", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "nginx-svc"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
}

func newPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

func newAdminBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: grant.ServiceAccount, Namespace: grant.DefaultNamespace}},
	}
}

func patchLabel(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return errOf(c.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"edited":"yes"}}}`), metav1.PatchOptions{}))
}

// Linking again changes nothing; each named source gets a token of its
// own; unlinking one source revokes its token alone and keeps the
// ServiceAccount for the other; unlinking the last removes it.
func TestLinkIdempotentPerSource(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	cleanLinks(t, west)
	env.CreateNamespace(t, grant.DefaultLinkNamespace, east)

	args := []string{"link", "--cluster", "west", "--source-cluster", "east", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig}
	r := mustRun(t, args...)
	assert.Empty(t, r.stdout, "applied, not printed")
	first, err := east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, "cluster-credentials-west", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "west", first.Labels[labels.LinkClusterName])
	token, err := west.Client.CoreV1().Secrets(grant.DefaultNamespace).Get(ctx, "mcmirror-link-token-east", metav1.GetOptions{})
	require.NoError(t, err)
	sa, err := west.Client.CoreV1().ServiceAccounts(grant.DefaultNamespace).Get(ctx, grant.ServiceAccount, metav1.GetOptions{})
	require.NoError(t, err)

	mustRun(t, args...)
	again, err := east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, first.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, first.ResourceVersion, again.ResourceVersion, "the link Secret is not even rewritten: the link does not restart")
	tokenAgain, err := west.Client.CoreV1().Secrets(grant.DefaultNamespace).Get(ctx, token.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, token.UID, tokenAgain.UID, "the same token")
	saAgain, err := west.Client.CoreV1().ServiceAccounts(grant.DefaultNamespace).Get(ctx, grant.ServiceAccount, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, sa.ResourceVersion, saAgain.ResourceVersion)

	// Paris links west too, printed: a token of its own.
	r = mustRun(t, "link", "--cluster", "west", "--source-cluster", "paris", "--kubeconfig", west.Kubeconfig)
	parisLink := linkClient(t, decodeSecret(t, r.stdout))
	eastLink := linkClient(t, first)
	for _, c := range []kubernetes.Interface{eastLink, parisLink} {
		_, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
	}

	r = mustRun(t, "unlink", "--cluster", "west", "--source-cluster", "east", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig)
	assert.Contains(t, r.stderr, "kept ServiceAccount mcmirror/mcmirror-link and its role: token Secrets mcmirror-link-token-paris still use them")
	_, err = east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, first.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "link Secret in east: %v", err)
	requireRevoked(t, ctx, eastLink, "east's token")
	_, err = parisLink.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "paris's link goes on")

	// Printed: the Secret to delete in paris.
	r = mustRun(t, "unlink", "--cluster", "west", "--source-cluster", "paris", "--kubeconfig", west.Kubeconfig)
	ref := decodeSecret(t, r.stdout)
	assert.Equal(t, "cluster-credentials-west", ref.Name)
	assert.Equal(t, grant.DefaultLinkNamespace, ref.Namespace)
	assert.Empty(t, ref.Data)
	assertGone(t, ctx, west)
	requireRevoked(t, ctx, parisLink, "paris's token")
}

// Each refusal is one line that says what is wrong, exit code 1, and,
// where it comes before any change, nothing changed.
func TestLinkRefusals(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west, paris := env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")
	cleanLinks(t, west)
	cleanLinks(t, paris)
	env.CreateNamespace(t, grant.DefaultLinkNamespace, east)

	refused := func(t *testing.T, want string, args ...string) {
		t.Helper()
		r := coredns(t, args...)
		assert.Equal(t, 1, r.code)
		if args[0] == "link" {
			assert.Empty(t, r.stdout)
		}
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		assert.Contains(t, lines[len(lines)-1], want)
		assert.Equal(t, 1, strings.Count(r.stderr, "coredns-mc "+args[0]+":"), "one error line: %s", r.stderr)
	}

	t.Run("credentials refused", func(t *testing.T) {
		refused(t, "target cluster "+west.Server+": the credentials are refused (401 Unauthorized)",
			"link", "--cluster", "west", "--kubeconfig", badTokenKubeconfig(t, west))
	})

	t.Run("caller may not create roles", func(t *testing.T) {
		// A user that may write ServiceAccounts, Secrets and Namespaces,
		// but not RBAC.
		require.NoError(t, west.Apply(ctx, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: no-rbac, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-no-rbac}
rules:
- apiGroups: [""]
  resources: [serviceaccounts, secrets, namespaces]
  verbs: [get, list, create, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-no-rbac}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-no-rbac}
subjects: [{kind: ServiceAccount, name: no-rbac, namespace: default}]
`))
		kc, err := west.ServiceAccountKubeconfig(ctx, "default", "no-rbac")
		require.NoError(t, err)
		refused(t, "target cluster "+west.Server+": forbidden: system:serviceaccount:default:no-rbac may not "+
			"create clusterroles.rbac.authorization.k8s.io, create clusterrolebindings.rbac.authorization.k8s.io, "+
			"patch clusterroles.rbac.authorization.k8s.io, patch clusterrolebindings.rbac.authorization.k8s.io, which it needs to grant the link's access",
			"link", "--cluster", "west", "--kubeconfig", harness.TempFile(t, "no-rbac.kubeconfig", kc))
		assertGone(t, ctx, west) // checked before anything was written
		refused(t, "may not delete clusterroles.rbac.authorization.k8s.io, delete clusterrolebindings.rbac.authorization.k8s.io, which it needs to remove the link's access",
			"unlink", "--cluster", "west", "--kubeconfig", harness.TempFile(t, "no-rbac.kubeconfig", kc))
	})

	t.Run("no token controller", func(t *testing.T) {
		refused(t, "target cluster "+paris.Server+": no token in Secret mcmirror/mcmirror-link-token after 3s: the token controller of kube-controller-manager writes it",
			"link", "--cluster", "paris", "--kubeconfig", paris.Kubeconfig, "--token-timeout", "3s")
		// What was granted is undone by unlink.
		mustRun(t, "unlink", "--cluster", "paris", "--kubeconfig", paris.Kubeconfig)
		assertGone(t, ctx, paris)
	})

	t.Run("name taken in the source", func(t *testing.T) {
		require.NoError(t, east.Apply(ctx, `
apiVersion: v1
kind: Secret
metadata:
  name: west-by-hand
  namespace: mcmirror-links
  labels: {multicluster.linkerd.io/cluster-name: west}
type: mirror.linkerd.io/remote-kubeconfig
data: {kubeconfig: ""}
`))
		refused(t, "source cluster "+east.Server+`: cluster "west" is already linked by Secret mcmirror-links/west-by-hand: unlink it first, or choose another name`,
			"link", "--cluster", "west", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig)
		assertGone(t, ctx, west)

		// unlink removes every Secret that links the name.
		r := mustRun(t, "unlink", "--cluster", "west", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig)
		assert.Contains(t, r.stderr, "deleted link Secrets mcmirror-links/west-by-hand")
		_, err := east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, "west-by-hand", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%v", err)
	})

	t.Run("no link namespace in the source", func(t *testing.T) {
		refused(t, "source cluster "+east.Server+": no namespace e2e-missing: apply deploy/controller.yaml there first, or give --link-namespace",
			"link", "--cluster", "west", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", east.Kubeconfig, "--link-namespace", "e2e-missing")
		assertGone(t, ctx, west)
	})

	t.Run("a cluster linked to itself", func(t *testing.T) {
		refused(t, "the source and the target are the same API server ("+west.Server+"): a cluster does not link to itself",
			"link", "--cluster", "west", "--kubeconfig", west.Kubeconfig, "--source-kubeconfig", west.Kubeconfig)
	})
}

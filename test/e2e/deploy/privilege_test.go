package deploy_test

// Least privilege, enforced by the real API servers: each ServiceAccount of
// deploy/ (the link's in the remote cluster, the gateway's, the
// controller's and the DNS's in the local one), with its real token, is
// refused every action of a table with 403 Forbidden, and the rules its
// SelfSubjectRulesReview lists, beyond those of a fresh ServiceAccount of
// the same namespace, are exactly the expected ones: a widened role fails
// the test, as does a narrowed one.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/test/harness"
)

// action is one request a ServiceAccount must be refused.
type action struct {
	what string
	do   func(ctx context.Context, c kubernetes.Interface) error
}

// secretReads are the reads of Secrets in ns (all namespaces when empty).
func secretReads(ns string) []action {
	in := cmp.Or(ns, "every namespace")
	acts := []action{
		{"list Secrets in " + in, func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}))
		}},
		{"watch Secrets in " + in, func(ctx context.Context, c kubernetes.Interface) error {
			w, err := c.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
	}
	if ns != "" {
		acts = append(acts, action{"get a Secret in " + ns, func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Secrets(ns).Get(ctx, "cluster-credentials-west", metav1.GetOptions{}))
		}})
	}
	return acts
}

// serviceWrites are the writes of a Service and an EndpointSlice in ns:
// those of the controller's mirrors, and more.
func serviceWrites(ns string) []action {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: ns}, AddressType: discoveryv1.AddressTypeIPv4}
	patch := []byte(`{"metadata":{"labels":{"mcmirror.dev/privilege-test":"x"}}}`)
	return []action{
		{"create a Service", func(ctx context.Context, c kubernetes.Interface) error {
			s := svc.DeepCopy()
			s.Name = "privilege-test"
			_, err := c.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"update a Service", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}))
		}},
		{"patch a Service", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Services(ns).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}))
		}},
		{"delete a Service", func(ctx context.Context, c kubernetes.Interface) error {
			return c.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{})
		}},
		{"delete every EndpointSlice", func(ctx context.Context, c kubernetes.Interface) error {
			return c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}},
		{"update a Service's status", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}))
		}},
		{"create an EndpointSlice", func(ctx context.Context, c kubernetes.Interface) error {
			e := es.DeepCopy()
			e.Name = "privilege-test"
			_, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, e, metav1.CreateOptions{})
			return err
		}},
		{"update an EndpointSlice", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{}))
		}},
		{"patch an EndpointSlice", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.DiscoveryV1().EndpointSlices(ns).Patch(ctx, es.Name, types.MergePatchType, patch, metav1.PatchOptions{}))
		}},
		{"delete an EndpointSlice", func(ctx context.Context, c kubernetes.Interface) error {
			return c.DiscoveryV1().EndpointSlices(ns).Delete(ctx, es.Name, metav1.DeleteOptions{})
		}},
	}
}

// otherReads are reads of what none of mcmirror's components reads.
func otherReads(ns string) []action {
	return []action{
		{"list Pods", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Pods("").List(ctx, metav1.ListOptions{}))
		}},
		{"get a Pod", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Pods(ns).Get(ctx, "any", metav1.GetOptions{}))
		}},
		{"list ConfigMaps", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}))
		}},
		{"list Endpoints", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Endpoints("").List(ctx, metav1.ListOptions{}))
		}},
		{"list Nodes", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}))
		}},
		{"list Deployments", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}))
		}},
		{"list ClusterRoles", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}))
		}},
	}
}

// escalations are ways to more privilege than the role has.
func escalations(self, ns string) []action {
	return []action{
		{"bind cluster-admin in " + ns, func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "privilege-test"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: self, Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		}},
		{"create a token for itself", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, self, &authenticationv1.TokenRequest{}, metav1.CreateOptions{}))
		}},
		{"create a Pod", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "privilege-test"},
				Spec:       corev1.PodSpec{ServiceAccountName: self, Containers: []corev1.Container{{Name: "x", Image: "x"}}},
			}, metav1.CreateOptions{})
			return err
		}},
		{"create a Secret", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "privilege-test"}}, metav1.CreateOptions{}))
		}},
		{"create a Namespace", func(ctx context.Context, c kubernetes.Interface) error {
			return errOf(c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "privilege-test"}}, metav1.CreateOptions{}))
		}},
		{"delete a Namespace", func(ctx context.Context, c kubernetes.Interface) error {
			return c.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{})
		}},
	}
}

func eventCreate(ns string) action {
	return action{"create an Event in " + ns, func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "privilege-test"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "x"},
		}, metav1.CreateOptions{})
		return err
	}}
}

func serviceGet(ns string) action {
	return action{"get a Service by name", func(ctx context.Context, c kubernetes.Interface) error {
		return errOf(c.CoreV1().Services(ns).Get(ctx, "kubernetes", metav1.GetOptions{}))
	}}
}

// errOf is the error of a call that returns a value too.
func errOf[T any](_ T, err error) error { return err }

// only returns the actions of acts named whats.
func only(acts []action, whats ...string) []action {
	var out []action
	for _, w := range whats {
		i := slices.IndexFunc(acts, func(a action) bool { return a.what == w })
		if i < 0 {
			panic("no action " + w)
		}
		out = append(out, acts[i])
	}
	return out
}

var getLinkSecret = action{"get a link Secret by name", func(ctx context.Context, c kubernetes.Interface) error {
	return errOf(c.CoreV1().Secrets(links).Get(ctx, "cluster-credentials-west", metav1.GetOptions{}))
}}

// account is a ServiceAccount of deploy/ and what it may do.
type account struct {
	cluster   string
	manifests []string // applied to cluster first
	ns, name  string
	// rules are, by namespace, the rules SelfSubjectRulesReview lists for
	// it beyond a fresh ServiceAccount's, as "verb group/resource[/name]"
	// ("" group: "verb resource").
	rules map[string][]string
	// refused must each be refused with 403.
	refused []action
}

const links = "mcmirror-links"

func accounts() []account {
	const disc = "discovery.k8s.io"
	read := func(verbs string, resources ...string) []string {
		var out []string
		for _, r := range resources {
			for _, v := range strings.Fields(verbs) {
				out = append(out, v+" "+r)
			}
		}
		return out
	}
	// The link: what the DNS plugin and the controller read of a remote
	// cluster, through informers.
	link := read("list watch", "services", disc+"/endpointslices")
	gw := read("list watch", "services", disc+"/endpointslices")
	ctrl := slices.Concat(read("list watch create update patch delete", "services"),
		read("get list watch create update delete", disc+"/endpointslices"),
		read("list watch", "namespaces"), read("create patch", "events"),
		read("list watch", "multicluster.x-k8s.io/serviceexports"), read("update", "multicluster.x-k8s.io/serviceexports/status"),
		read("list watch create update patch delete", "multicluster.x-k8s.io/serviceimports"), read("update", "multicluster.x-k8s.io/serviceimports/status"),
		[]string{"get about.k8s.io/clusterproperties/cluster.clusterset.k8s.io"})
	dns := read("list watch", "services", "namespaces", disc+"/endpointslices")
	return []account{{
		cluster: "west", manifests: []string{"remote-link.yaml"}, ns: "mcmirror", name: "mcmirror-link",
		rules: map[string][]string{"default": link, "mcmirror": link, "kube-system": link},
		refused: slices.Concat(secretReads(""), secretReads("kube-system"), secretReads("mcmirror"),
			serviceWrites("default"), otherReads("default"), escalations("mcmirror-link", "mcmirror"),
			[]action{eventCreate("default"), eventCreate("mcmirror"), serviceGet("default")}),
	}, {
		cluster: "east", manifests: []string{"gateway.yaml"}, ns: gatewayNS, name: gatewayName,
		rules: map[string][]string{"default": gw, gatewayNS: slices.Concat(gw, read("create patch", "events"))},
		refused: slices.Concat(secretReads(""), secretReads(gatewayNS), secretReads(links),
			serviceWrites("default"), serviceWrites(gatewayNS), otherReads(gatewayNS), escalations(gatewayName, gatewayNS),
			[]action{eventCreate("default"), serviceGet("default")}),
	}, {
		cluster: "east", manifests: []string{"controller.yaml"}, ns: "mcmirror", name: "mcmirror-controller",
		rules: map[string][]string{
			"default": ctrl,
			"mcmirror": slices.Concat(ctrl, []string{"create coordination.k8s.io/leases",
				"get coordination.k8s.io/leases/mcmirror-controller", "update coordination.k8s.io/leases/mcmirror-controller"}),
			links: slices.Concat(ctrl, read("list watch", "secrets")),
		},
		// Of Services and EndpointSlices, it may create, update and delete
		// (any of them: RBAC cannot tell its mirrors from the others;
		// deploy/README.md, "What each role can do"). The rest is refused.
		refused: slices.Concat(secretReads(""), secretReads("kube-system"), secretReads("mcmirror"),
			otherReads("default"), escalations("mcmirror-controller", "mcmirror"),
			only(serviceWrites("default"), "update a Service's status", "patch an EndpointSlice", "delete every EndpointSlice"),
			[]action{serviceGet("default"), getLinkSecret,
				{"update another Lease", func(ctx context.Context, c kubernetes.Interface) error {
					_, err := c.CoordinationV1().Leases("kube-system").Update(ctx, &coordinationv1.Lease{
						ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system"}}, metav1.UpdateOptions{})
					return err
				}},
				{"get another Lease in mcmirror", func(ctx context.Context, c kubernetes.Interface) error {
					return errOf(c.CoordinationV1().Leases("mcmirror").Get(ctx, "someone-else", metav1.GetOptions{}))
				}},
				{"delete its Lease", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoordinationV1().Leases("mcmirror").Delete(ctx, "mcmirror-controller", metav1.DeleteOptions{})
				}},
			}),
	}, {
		cluster: "east", manifests: []string{"coredns.yaml"}, ns: "kube-system", name: "coredns",
		rules: map[string][]string{"default": dns, links: slices.Concat(dns, read("list watch", "secrets"))},
		refused: slices.Concat(secretReads(""), secretReads("kube-system"),
			serviceWrites("default"), otherReads("default"), escalations("coredns", "kube-system"),
			[]action{eventCreate("default"), getLinkSecret}),
	}}
}

// ruleStrings expands a rules review into "verb group/resource[/name]" and
// "verb url" strings.
func ruleStrings(st authorizationv1.SubjectRulesReviewStatus) []string {
	var out []string
	for _, r := range st.ResourceRules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, v+" "+path.Join(g, res, n)) // "" parts left out
					}
				}
			}
		}
	}
	for _, r := range st.NonResourceRules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out = append(out, v+" "+u)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rulesOf returns what the client may do in ns, by SelfSubjectRulesReview.
func rulesOf(t require.TestingT, ctx context.Context, c kubernetes.Interface, ns string) []string {
	r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.False(t, r.Status.Incomplete, "rules review incomplete: %s", r.Status.EvaluationError)
	return ruleStrings(r.Status)
}

// freshAccount creates, in namespace ns of cluster c, ServiceAccount name
// bound to nothing (unless it is there already), and returns a client of
// it: what every account may do (discovery, self reviews).
func freshAccount(t *testing.T, c *harness.Cluster, ns, name string) kubernetes.Interface {
	t.Helper()
	require.NoError(t, c.Apply(context.Background(), serviceAccount(ns, name)))
	return saClient(t, c, ns, name)
}

// waitExtraRules waits until the rules of client in ns beyond those of
// baseline are want (sorted): RBAC is read through an informer, so the
// bindings of a manifest just applied count a moment later.
func waitExtraRules(t *testing.T, client, baseline kubernetes.Interface, ns string, want []string) {
	t.Helper()
	ctx := context.Background()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		base := rulesOf(ct, ctx, baseline, ns)
		var extra []string
		for _, r := range rulesOf(ct, ctx, client, ns) {
			if _, found := slices.BinarySearch(base, r); !found {
				extra = append(extra, r)
			}
		}
		assert.Equal(ct, want, extra, "rules in namespace %s beyond a fresh ServiceAccount's", ns)
	}, wait, tick)
}

func saClient(t *testing.T, c *harness.Cluster, ns, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := c.ServiceAccountConfig(context.Background(), ns, name)
	require.NoError(t, err)
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// Each ServiceAccount of deploy/, with its real token, may do exactly what
// its rules list, and is refused with 403 what it may not.
func TestLeastPrivilege(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	for _, a := range accounts() {
		t.Run(a.ns+"/"+a.name, func(t *testing.T) {
			c := env.Cluster(a.cluster)
			for _, m := range a.manifests {
				require.NoError(t, c.Apply(ctx, harness.RepoFile(t, "deploy", m)))
			}
			client := saClient(t, c, a.ns, a.name)
			user := fmt.Sprintf("system:serviceaccount:%s:%s", a.ns, a.name)
			// The role is what a fresh ServiceAccount of the same
			// namespace may not do.
			baseline := freshAccount(t, c, a.ns, "mcmirror-privilege-baseline")

			t.Run("rules", func(t *testing.T) {
				for _, ns := range slices.Sorted(maps.Keys(a.rules)) {
					waitExtraRules(t, client, baseline, ns, slices.Sorted(slices.Values(a.rules[ns])))
				}
			})

			t.Run("refused", func(t *testing.T) {
				for _, act := range a.refused {
					err := act.do(ctx, client)
					if assert.True(t, apierrors.IsForbidden(err), "%s: %s: want 403 Forbidden, got %v", user, act.what, err) {
						assert.Contains(t, err.Error(), `"`+user+`" cannot`, "%s: refused to that ServiceAccount by RBAC", act.what)
					}
				}
			})
		})
	}
}

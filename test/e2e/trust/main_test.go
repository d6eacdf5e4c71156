// Package trust_test proves, against real API servers and real processes,
// what the gateway and the controller believe: the egress route table comes
// only from what the controller wrote (deploy/admission-policy.yaml refuses
// everyone else's mirror labels; without it, a forged Service changes no
// route of a real mirror), and the ingress dials only the pods of the
// exported Service, ending the streams an export no longer allows.
//
// Clusters: west exports Services whose endpoints are real servers in
// network namespaces (harness.RunPod); east mirrors them with the real
// controller, as the cluster admin, and no admission policy; guarded has
// deploy/admission-policy.yaml applied and the MCS API's CRDs, and its
// controller runs as the ServiceAccount of deploy/controller.yaml. No cluster has a data plane:
// clients connect to the egress ports on 127.0.0.1.
package trust_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"}, {Name: "west"}, {Name: "guarded", MCS: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	wait = 60 * time.Second
	tick = 50 * time.Millisecond

	podPort     = 8080
	servicePort = 80
)

// startFleet starts, for the test t, east's controller linked to west,
// west's gateway (ingress) with westArgs and east's gateway (egress), on
// 127.0.0.1 (no cluster has a data plane), with the egress port range
// ports. Each test starts its own: tests give west's ingress flags of
// their own.
func startFleet(t *testing.T, ports harness.PortRange, westArgs ...string) *harness.Fleet {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"},
		Parts: harness.FleetController | harness.FleetGateways, EgressPorts: ports.String(), IngressArgs: westArgs})
}

// aggregateEdit gives c's edit ClusterRole (and view, which edit
// aggregates) its rules, as kube-controller-manager's
// clusterrole-aggregation controller does (these clusters run none): the
// union of the rules of the ClusterRoles its aggregationRule selects, the
// API server's bootstrap roles system:aggregate-to-edit and, through view,
// system:aggregate-to-view.
func aggregateEdit(t *testing.T, c *harness.Cluster) {
	t.Helper()
	ctx := context.Background()
	all, err := c.Client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	byName := map[string]*rbacv1.ClusterRole{}
	for i := range all.Items {
		byName[all.Items[i].Name] = &all.Items[i]
	}
	var rulesOf func(r *rbacv1.ClusterRole, depth int) []rbacv1.PolicyRule
	rulesOf = func(r *rbacv1.ClusterRole, depth int) []rbacv1.PolicyRule {
		if r.AggregationRule == nil || depth > 3 {
			return r.Rules
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range r.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			require.NoError(t, err)
			for _, o := range all.Items {
				if o.Name != r.Name && s.Matches(k8slabels.Set(o.Labels)) {
					rules = append(rules, rulesOf(byName[o.Name], depth+1)...)
				}
			}
		}
		return rules
	}
	for _, name := range []string{"view", "edit"} {
		role := byName[name]
		require.NotNil(t, role, name)
		rules := rulesOf(role, 0)
		require.NotEmpty(t, rules, name)
		if apiequality.Semantic.DeepEqual(rules, role.Rules) {
			continue
		}
		role.Rules = rules
		_, err := c.Client.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
}

// editor makes a ServiceAccount in ns of cluster c, bound to the edit
// ClusterRole in ns only (what a namespace's developers get), and returns
// a client that authenticates as it.
func editor(t *testing.T, c *harness.Cluster, ns, name string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	aggregateEdit(t, c)
	_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := c.ServiceAccountConfig(ctx, ns, name)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	// The authorizer reads the binding from its own cache: wait for it.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "update", Resource: "services"}}}, metav1.CreateOptions{})
		require.NoError(ct, err)
		assert.True(ct, r.Status.Allowed)
		_, err = client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		assert.NoError(ct, err)
	}, wait, tick, "%s/%s may edit %s", ns, name, ns)
	return client
}

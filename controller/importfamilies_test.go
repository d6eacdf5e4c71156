package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// withFamilies is source s reached by families.
func withFamilies(s importSource, families ...corev1.IPFamily) importSource {
	s.families = families
	return s
}

// dualDerived is the live derived Service with ClusterIPs of families.
func dualDerived(policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) *corev1.Service {
	d := liveDerived(false)
	d.Spec.IPFamilyPolicy = ptr.To(policy)
	d.Spec.IPFamilies = families
	d.Spec.ClusterIPs = nil
	for _, f := range families {
		ip := "10.96.5.5"
		if f == corev1.IPv6Protocol {
			ip = "fd00:96::5"
		}
		d.Spec.ClusterIPs = append(d.Spec.ClusterIPs, ip)
	}
	d.Spec.ClusterIP = d.Spec.ClusterIPs[0]
	return d
}

// The derived Service of a ClusterSetIP import takes the families its
// sources are reached by, on every sync and both ways: dual-stack while
// they have two, single-stack in the one they have, and a replacement
// only when its primary family is none of theirs.
func TestPlanImportFamilies(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	west := importSource{cluster: "west", service: testExportService(nil)}
	paris := importSource{cluster: "paris", service: testExportService(nil), created: west.created.Add(1)}
	plan := func(derived *corev1.Service, sources ...importSource) importPlan {
		return planImport(importInput{ns: "shop", name: "web", sources: sources, derived: derived})
	}
	policy := func(p importPlan) string { return string(ptr.Deref(p.derived.Spec.IPFamilyPolicy, "")) }

	for _, tc := range []struct {
		name     string
		derived  *corev1.Service
		sources  []importSource
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily // of the derived Service written
		replace  bool
		spec     []corev1.IPFamily // the ServiceImport's
	}{
		{name: "new, two families: the cluster's, both where it has them", sources: []importSource{withFamilies(west, v4, v6)},
			policy: corev1.IPFamilyPolicyPreferDualStack, spec: []corev1.IPFamily{v4, v6}},
		{name: "new, IPv6 only: IPv6, not the cluster's default", sources: []importSource{withFamilies(west, v6)},
			policy: corev1.IPFamilyPolicySingleStack, families: []corev1.IPFamily{v6}, spec: []corev1.IPFamily{v6}},
		{name: "new, one family each: both, in order of precedence", sources: []importSource{withFamilies(paris, v4), withFamilies(west, v6)},
			policy: corev1.IPFamilyPolicyPreferDualStack, spec: []corev1.IPFamily{v6, v4}},
		{name: "new, no family known yet: the cluster's default", sources: []importSource{west}},
		{name: "dual-stack, the IPv6 exports gone: single-stack in place", derived: dualDerived(corev1.IPFamilyPolicyPreferDualStack, v4, v6),
			sources: []importSource{withFamilies(west, v4)}, policy: corev1.IPFamilyPolicySingleStack, families: []corev1.IPFamily{v4},
			spec: []corev1.IPFamily{v4, v6}},
		{name: "single-stack, an IPv6 export added: dual-stack in place", derived: dualDerived(corev1.IPFamilyPolicySingleStack, v4),
			sources: []importSource{withFamilies(west, v6), withFamilies(paris, v4)}, policy: corev1.IPFamilyPolicyPreferDualStack,
			spec: []corev1.IPFamily{v4}},
		{name: "IPv4, only IPv6 exports left: replaced", derived: dualDerived(corev1.IPFamilyPolicyPreferDualStack, v4, v6),
			sources: []importSource{withFamilies(west, v6)}, policy: corev1.IPFamilyPolicySingleStack, families: []corev1.IPFamily{v6},
			replace: true, spec: []corev1.IPFamily{v6}},
		{name: "existing, no family known: left as it is", derived: dualDerived(corev1.IPFamilyPolicyPreferDualStack, v4, v6),
			sources: []importSource{west}, spec: []corev1.IPFamily{v4, v6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan(tc.derived, tc.sources...)
			assert.Equal(t, string(tc.policy), policy(p))
			assert.Equal(t, tc.families, p.derived.Spec.IPFamilies)
			assert.Equal(t, tc.replace, p.replace)
			assert.Equal(t, tc.spec, p.spec.IPFamilies)
		})
	}

	// Headless: no ClusterSetIP, no family of its own; the ServiceImport
	// says the sources'.
	h := withFamilies(west, v6)
	h.service = testExportService(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	p := plan(nil, h)
	assert.Nil(t, p.derived.Spec.IPFamilyPolicy)
	assert.Equal(t, []corev1.IPFamily{v6}, p.spec.IPFamilies)

	// The slices kept for a link that has not synced keep their family.
	p = planImport(importInput{ns: "shop", name: "web", sources: []importSource{withFamilies(west, v4)},
		kept: map[string][]*discoveryv1.EndpointSlice{"tokyo": {sourceSlice(discoveryv1.AddressTypeIPv6, 80, "fd00::7")}}})
	assert.Equal(t, []corev1.IPFamily{v4, v6}, p.spec.IPFamilies)
}

// applyDerived writes a changed family policy by an update of the
// derived Service (the API server adds or drops the second family and
// ClusterIP), and writes nothing when it is as wanted.
func TestApplyDerivedFamilies(t *testing.T) {
	live := dualDerived(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	client := fake.NewClientset(live)
	c := &Controller{client: client}
	west := withFamilies(importSource{cluster: "west", service: testExportService(nil)}, corev1.IPv4Protocol)
	p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{west}, derived: live})
	got, err := c.applyDerived(t.Context(), live, p)
	require.NoError(t, err)
	require.Len(t, client.Actions(), 1)
	require.Equal(t, "update", client.Actions()[0].GetVerb())
	updated := client.Actions()[0].(k8stesting.UpdateAction).GetObject().(*corev1.Service)
	assert.Equal(t, corev1.IPFamilyPolicySingleStack, *updated.Spec.IPFamilyPolicy)
	assert.Equal(t, live.UID, got.UID, "in place")

	client.ClearActions()
	_, err = c.applyDerived(t.Context(), got, planImport(importInput{ns: "shop", name: "web", sources: []importSource{west}, derived: got}))
	require.NoError(t, err)
	assert.Empty(t, client.Actions(), "as wanted: no write")
}

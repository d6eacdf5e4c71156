package controller

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
)

// Dual-stack mirrors: a remote Service of two IP families, mirrored
// through an egress with addresses of both, gets a PreferDualStack mirror
// (its primary family the remote's) and one egress EndpointSlice per
// family; anything else keeps a single-stack mirror in the egress family.

var (
	v4, v6     = corev1.IPv4Protocol, corev1.IPv6Protocol
	dualEgress = []string{"192.0.2.10", "192.0.2.11", "2001:db8::10"}
	dualAddr   = addrs(dualEgress...)
)

// dualRemote is exported with the remote's IP families (two: dual-stack).
func dualRemote(svc *corev1.Service, fams ...corev1.IPFamily) *corev1.Service {
	svc.Spec.IPFamilies = fams
	svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
	if len(fams) == 2 {
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	}
	return svc
}

// families is what a mirror asks of the API server: its policy and the
// families it lists ("" policy: none).
func families(svc *corev1.Service) string {
	if svc.Spec.IPFamilyPolicy == nil {
		return fmt.Sprint(svc.Spec.IPFamilies)
	}
	return fmt.Sprintf("%s %v", *svc.Spec.IPFamilyPolicy, svc.Spec.IPFamilies)
}

func TestPlanDualStack(t *testing.T) {
	web := func(fams ...corev1.IPFamily) *corev1.Service {
		return dualRemote(exported("default", "web", "true", false, tcp("http", 80)), fams...)
	}
	existing := func(fams ...corev1.IPFamily) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-west", Labels: map[string]string{}},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", IPFamilies: fams}}
	}
	for _, tc := range []struct {
		name     string
		remote   *corev1.Service
		egress   []corev1.IPFamily
		existing *corev1.Service
		want     string
		replace  bool
	}{
		{"dual remote, dual egress: dual, the remote's primary", web(v4, v6), []corev1.IPFamily{v4, v6}, nil, "PreferDualStack [IPv4]", false},
		{"dual remote IPv6 first: IPv6 primary", web(v6, v4), []corev1.IPFamily{v4, v6}, nil, "PreferDualStack [IPv6]", false},
		{"dual remote, IPv4-only egress: single", web(v6, v4), []corev1.IPFamily{v4}, nil, "SingleStack [IPv4]", false},
		{"dual remote, IPv6-only egress: single", web(v4, v6), []corev1.IPFamily{v6}, nil, "SingleStack [IPv6]", false},
		{"single remote, dual egress: single, IPv4", web(v4), []corev1.IPFamily{v4, v6}, nil, "SingleStack [IPv4]", false},
		{"single IPv6 remote, dual egress: as before, IPv4", web(v6), []corev1.IPFamily{v4, v6}, nil, "SingleStack [IPv4]", false},
		{"egress not known: the cluster's default", web(v4, v6), nil, nil, "[]", false},
		{"a family added in place: the existing primary is kept", web(v6, v4), []corev1.IPFamily{v4, v6}, existing(v4), "PreferDualStack [IPv4]", false},
		{"dual to single in place", web(v4), []corev1.IPFamily{v4, v6}, existing(v4, v6), "SingleStack [IPv4]", false},
		{"an IPv6 mirror stays IPv6 while the egress has IPv6", web(v4), []corev1.IPFamily{v4, v6}, existing(v6), "SingleStack [IPv6]", false},
		{"the egress lost the primary family: replaced", web(v6, v4), []corev1.IPFamily{v4}, existing(v6, v4), "SingleStack [IPv4]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := planIn(tc.remote)
			in.egressFamilies = tc.egress
			if tc.existing != nil {
				in.owned["web-west"] = tc.existing
			}
			p := planServices(in)
			require.Len(t, p.wants, 1)
			assert.Equal(t, tc.want, families(p.wants[0].svc))
			if tc.existing != nil {
				assert.Equal(t, tc.replace, replaceReason(tc.existing, p.wants[0].svc) != "")
			}
		})
	}

	// Per-pod mirrors of a dual-stack headless Service: the same rule;
	// the headless mirror has no ClusterIP to choose.
	db := dualRemote(exported("default", "db", "true", true, tcp("http", 80)), v6, v4)
	in := planIn(db, endpoints("default", "db", "db-0", "db-1"))
	in.egressFamilies = []corev1.IPFamily{v4, v6}
	p := planServices(in)
	require.Equal(t, []string{"db-west", "db-0-west", "db-1-west"}, wantNames(p))
	assert.Equal(t, "[]", families(p.wants[0].svc))
	assert.Equal(t, "PreferDualStack [IPv6]", families(p.wants[1].svc))
	assert.Equal(t, "PreferDualStack [IPv6]", families(p.wants[2].svc))
}

// The egress slices of a mirror follow its families as the API server has
// them: one per family, each listing the egress addresses of its type at
// the same egress ports; the secondary family's slice only while the
// egress has addresses of it.
func TestPlanSlicesDualStack(t *testing.T) {
	in := planIn(dualRemote(exported("default", "web", "true", false, tcp("http", 80)), v6, v4))
	in.egressFamilies = []corev1.IPFamily{v4, v6}
	p := planServices(in)
	live := p.wants[0].svc.DeepCopy()
	live.Annotations[labels.EgressPorts] = "80/TCP=30000"
	live.Spec.IPFamilies = []corev1.IPFamily{v6, v4} // as the API server makes it
	slicesOf := func(egress []netip.Addr) map[string]*discoveryv1.EndpointSlice {
		desired, known := planSlices(sliceInput{cluster: "west", ns: "default", name: "web", plan: p,
			live: map[string]*corev1.Service{"web-west": live}, egress: egress})
		assert.True(t, known["web-west"])
		return desired
	}
	desired := slicesOf(dualAddr)
	require.Equal(t, []string{"web-west", "web-west.ipv4"}, slices.Sorted(maps.Keys(desired)))
	assert.Equal(t, discoveryv1.AddressTypeIPv6, desired["web-west"].AddressType, "the primary family's slice is named as the Service")
	assert.Equal(t, []string{"2001:db8::10"}, endpointsOf(desired["web-west"]))
	assert.Equal(t, discoveryv1.AddressTypeIPv4, desired["web-west.ipv4"].AddressType)
	assert.Equal(t, []string{"192.0.2.10", "192.0.2.11"}, endpointsOf(desired["web-west.ipv4"]))
	for _, es := range desired {
		require.Len(t, es.Ports, 1)
		assert.Equal(t, int32(30000), *es.Ports[0].Port)
		assert.Equal(t, "web-west", es.Labels[discoveryv1.LabelServiceName])
		_, owned := ownedKey(es)
		assert.True(t, owned, es.Name)
	}

	// The egress loses its IPv4 addresses before the mirror is changed:
	// no IPv4 slice, and the one there is goes (garbage).
	desired = slicesOf(addrs("2001:db8::10"))
	assert.Equal(t, []string{"web-west"}, slices.Sorted(maps.Keys(desired)))
	owned := map[string]*discoveryv1.EndpointSlice{"web-west.ipv4": {ObjectMeta: metav1.ObjectMeta{Name: "web-west.ipv4",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web-west"}}}}
	delSlices, delServices := garbage(p, map[string]*corev1.Service{"web-west": live}, owned, desired, map[string]bool{"web-west": true})
	assert.Equal(t, []string{"web-west.ipv4"}, delSlices)
	assert.Empty(t, delServices)

	// A single-stack mirror: one slice, of its family only.
	live.Spec.IPFamilies = []corev1.IPFamily{v4}
	desired = slicesOf(dualAddr)
	require.Equal(t, []string{"web-west"}, slices.Sorted(maps.Keys(desired)))
	assert.Equal(t, []string{"192.0.2.10", "192.0.2.11"}, endpointsOf(desired["web-west"]))
}

// The names of a mirror's slices are the controller's: the mirror's own,
// and <mirror>.<something> (a headless mirror's further slices, a
// dual-stack mirror's second family, a flat-mode mirror's copies), which
// no Service's own slice can have; nothing else.
func TestOwnSliceName(t *testing.T) {
	for name, want := range map[string]bool{
		"web-west": true, "web-west.2": true, "web-west.ipv4": true, "web-west.ipv6": true, "web-west.web-x7k2p": true,
		"web-west-ipv6": false, "web-west.": false, "web-westx": false, "web-wes": false, "web-west-abcde": false,
	} {
		assert.Equal(t, want, ownSliceName(name, "web-west"), name)
	}
}

// dualStackAPI makes the fake local API server allocate ClusterIPs as a
// dual-stack one (IPv4 primary by default) does: a family for each
// ClusterIP, PreferDualStack getting both, SingleStack to PreferDualStack
// adding the second family in place, back to SingleStack releasing it,
// and the primary family immutable.
func dualStackAPI(f *fixture) {
	var next atomic.Int32
	alloc := func(fam corev1.IPFamily) string {
		n := next.Add(1)
		if fam == v6 {
			return fmt.Sprintf("fd00:10:96::%x", n)
		}
		return fmt.Sprintf("10.96.100.%d", n)
	}
	other := func(fam corev1.IPFamily) corev1.IPFamily {
		if fam == v4 {
			return v6
		}
		return v4
	}
	f.local.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return false, nil, nil
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{v4}
		}
		if svc.Spec.IPFamilyPolicy == nil {
			svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
		}
		if *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack && len(svc.Spec.IPFamilies) == 1 {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, other(svc.Spec.IPFamilies[0]))
		}
		svc.Spec.ClusterIPs = nil
		for _, fam := range svc.Spec.IPFamilies {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, alloc(fam))
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		return false, nil, nil
	})
	f.local.PrependReactor("update", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.UpdateAction).GetObject().(*corev1.Service)
		obj, err := f.local.Tracker().Get(svcGVR, svc.Namespace, svc.Name)
		if err != nil || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return false, nil, nil
		}
		old := obj.(*corev1.Service)
		if len(svc.Spec.IPFamilies) == 0 || svc.Spec.IPFamilies[0] != old.Spec.IPFamilies[0] || svc.Spec.ClusterIP != old.Spec.ClusterIP {
			return true, nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name,
				field.ErrorList{field.Invalid(field.NewPath("spec", "ipFamilies").Index(0), svc.Spec.IPFamilies, "primary family is immutable")})
		}
		switch single := *svc.Spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack; {
		case single && len(svc.Spec.IPFamilies) == 2:
			svc.Spec.IPFamilies, svc.Spec.ClusterIPs = svc.Spec.IPFamilies[:1], svc.Spec.ClusterIPs[:1]
		case !single && len(svc.Spec.IPFamilies) == 1 && *old.Spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack:
			fam := other(svc.Spec.IPFamilies[0])
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, fam)
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, alloc(fam))
		}
		return false, nil, nil
	})
}

// dualFixture follows an egress Service with addresses of both families,
// on a dual-stack local API server.
func dualFixture(t *testing.T, remote ...runtime.Object) *fixture {
	f := newFixture(t, fixtureOptions{egressService: gatewayEgress, local: []runtime.Object{
		gatewaySlice("gw-4", discoveryv1.AddressTypeIPv4, "192.0.2.11", "192.0.2.10"),
		gatewaySlice("gw-6", discoveryv1.AddressTypeIPv6, "2001:db8::10"),
	}}, west(remote...))
	f.waitEgress(dualEgress...)
	dualStackAPI(f)
	return f
}

// assertDualSlices checks the egress slices of mirror name: by slice name,
// its address type and addresses, all at the mirror's egress ports.
func (f *fixture) assertDualSlices(name string, want map[string]string) {
	f.t.Helper()
	svc := f.service("default", name)
	require.NotNil(f.t, svc)
	list, err := f.local.DiscoveryV1().EndpointSlices("default").List(f.ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	got := map[string]string{}
	for _, es := range list.Items {
		if es.Labels[discoveryv1.LabelServiceName] != name {
			continue
		}
		got[es.Name] = fmt.Sprintf("%s %v", es.AddressType, endpointsOf(&es))
		require.Len(f.t, es.Ports, 1)
		assert.Equal(f.t, labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])["80/TCP"], *es.Ports[0].Port, es.Name)
	}
	assert.Equal(f.t, want, got, name)
}

func TestSyncDualStack(t *testing.T) {
	web := exported("default", "web", "true", false, tcp("http", 80))
	f := dualFixture(t, dualRemote(web.DeepCopy(), v4))

	// A single-stack remote: a single-stack mirror, IPv4 only.
	assert.Equal(t, []string{"create services web-west", "create endpointslices web-west"}, f.converge("west/default/web"))
	before := f.service("default", "web-west")
	assert.Equal(t, "SingleStack [IPv4]", families(before))
	f.assertDualSlices("web-west", map[string]string{"web-west": "IPv4 [192.0.2.10 192.0.2.11]"})

	// The remote becomes dual-stack: the mirror gains the second family in
	// place (the same object, the same primary ClusterIP) and its slice.
	dual := dualRemote(web.DeepCopy(), v6, v4)
	dual.ResourceVersion = "8"
	f.remote("west", dual)
	assert.Equal(t, []string{"update services web-west", "update services web-west", "create endpointslices web-west.ipv6"},
		f.converge("west/default/web"), "the families, then the remote resourceVersion; never a delete")
	after := f.service("default", "web-west")
	assert.Equal(t, before.UID, after.UID)
	assert.Equal(t, []corev1.IPFamily{v4, v6}, after.Spec.IPFamilies)
	require.Len(t, after.Spec.ClusterIPs, 2)
	assert.Equal(t, before.Spec.ClusterIP, after.Spec.ClusterIPs[0])
	f.assertDualSlices("web-west", map[string]string{
		"web-west":      "IPv4 [192.0.2.10 192.0.2.11]",
		"web-west.ipv6": "IPv6 [2001:db8::10]",
	})
	assert.Empty(t, f.sync("west/default/web"), "second sync of unchanged state")

	// The egress loses its IPv6 addresses: the IPv6 slice goes, the mirror
	// stays, single-stack again.
	require.NoError(t, f.local.DiscoveryV1().EndpointSlices(gatewayEgress.Namespace).Delete(f.ctx, "gw-6", metav1.DeleteOptions{}))
	f.waitEgress("192.0.2.10", "192.0.2.11")
	assert.Equal(t, []string{"update services web-west", "delete endpointslices web-west.ipv6"}, f.converge("west/default/web"))
	after = f.service("default", "web-west")
	assert.Equal(t, before.UID, after.UID)
	assert.Equal(t, "SingleStack [IPv4]", families(after))
	assert.Equal(t, []string{before.Spec.ClusterIP}, after.Spec.ClusterIPs)
	f.assertDualSlices("web-west", map[string]string{"web-west": "IPv4 [192.0.2.10 192.0.2.11]"})
	assert.Equal(t, 1, f.c.ports.Len(), "one egress port all along")
}

// A new mirror of a remote whose primary family is IPv6 is IPv6 first; a
// per-pod mirror of a dual-stack headless Service is dual-stack too.
func TestSyncDualStackNew(t *testing.T) {
	f := dualFixture(t,
		dualRemote(exported("default", "web", "true", false, tcp("http", 80)), v6, v4),
		dualRemote(exported("default", "db", "true", true, tcp("http", 80)), v4, v6), endpoints("default", "db", "db-0"))
	f.convergeAll("west/default/web", "west/default/db")

	web := f.service("default", "web-west")
	assert.Equal(t, []corev1.IPFamily{v6, v4}, web.Spec.IPFamilies)
	assert.Equal(t, corev1.IPFamilyPolicyPreferDualStack, *web.Spec.IPFamilyPolicy)
	f.assertDualSlices("web-west", map[string]string{
		"web-west":      "IPv6 [2001:db8::10]",
		"web-west.ipv4": "IPv4 [192.0.2.10 192.0.2.11]",
	})
	pod := f.service("default", "db-0-west")
	assert.Equal(t, []corev1.IPFamily{v4, v6}, pod.Spec.IPFamilies)
	assert.Len(t, pod.Spec.ClusterIPs, 2)
	f.assertDualSlices("db-0-west", map[string]string{
		"db-0-west":      "IPv4 [192.0.2.10 192.0.2.11]",
		"db-0-west.ipv6": "IPv6 [2001:db8::10]",
	})
	hs := f.slice("default", "db-west")
	require.Len(t, hs.Endpoints, 1)
	assert.Equal(t, []string{pod.Spec.ClusterIP}, hs.Endpoints[0].Addresses, "the headless mirror lists the primary ClusterIPs")

	// The egress loses IPv6: the IPv6-first mirror cannot keep its primary
	// family, and is made again in IPv4; the per-pod mirror stays.
	require.NoError(t, f.local.DiscoveryV1().EndpointSlices(gatewayEgress.Namespace).Delete(f.ctx, "gw-6", metav1.DeleteOptions{}))
	f.waitEgress("192.0.2.10", "192.0.2.11")
	assert.Contains(t, f.converge("west/default/web"), "delete services web-west")
	assert.Equal(t, []corev1.IPFamily{v4}, f.service("default", "web-west").Spec.IPFamilies)
	f.assertDualSlices("web-west", map[string]string{"web-west": "IPv4 [192.0.2.10 192.0.2.11]"})
	f.converge("west/default/db")
	assert.Equal(t, pod.UID, f.service("default", "db-0-west").UID)
	f.assertDualSlices("db-0-west", map[string]string{"db-0-west": "IPv4 [192.0.2.10 192.0.2.11]"})
}

// A restart finds the dual-stack mirror's two slices its own, and writes
// nothing; its egress port is claimed once.
func TestSyncDualStackRestart(t *testing.T) {
	remote := []runtime.Object{dualRemote(exported("default", "web", "true", false, tcp("http", 80)), v4, v6)}
	f := dualFixture(t, remote...)
	f.converge("west/default/web")
	g := newFixture(t, fixtureOptions{egressService: gatewayEgress, local: f.mirrorState()}, west(remote...))
	g.waitEgress(dualEgress...)
	require.Eventually(t, func() bool { return len(g.c.ownedSlices()) == 2 }, 10*time.Second, time.Millisecond)
	assert.Empty(t, g.sync("west/default/web"))
	assert.Equal(t, 1, g.c.ports.Len())
}

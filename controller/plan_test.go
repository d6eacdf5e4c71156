package controller

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Tests of the pure steps: plain values in, plain values out, no client.

var t0 = time.Unix(1_000_000, 0)

func planIn(remote *corev1.Service, remoteSlices ...*discoveryv1.EndpointSlice) planInput {
	return planInput{cluster: "west", ns: "default", name: remote.Name, remote: remote, remoteSlices: remoteSlices,
		owned: map[string]*corev1.Service{}, taken: func(string) *corev1.Service { return nil }, now: t0}
}

func wantNames(p plan) []string {
	var out []string
	for _, w := range p.wants {
		out = append(out, w.svc.Name)
	}
	return out
}

func noticeReasons(p plan) []string {
	var out []string
	for _, n := range p.notices {
		out = append(out, n.reason)
	}
	return out
}

func TestPlanShapes(t *testing.T) {
	p := planServices(planIn(exported("default", "web", "true", false, tcp("http", 80))))
	assert.Equal(t, shapeClusterIP, p.shape)
	assert.Equal(t, []string{"web-west"}, wantNames(p))
	assert.True(t, p.wants[0].egress)

	p = planServices(planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-1", "db-0!")))
	assert.Equal(t, shapeHeadless, p.shape)
	assert.Equal(t, []string{"db-west", "db-0-west", "db-1-west"}, wantNames(p))
	assert.False(t, p.wants[1].ready)
	assert.True(t, p.wants[2].ready)
	assert.Equal(t, "db-west", p.wants[1].svc.Labels[labels.HeadlessMirrorSvcName])

	p = planServices(planIn(exported("default", "flat", "remote-discovery", true, tcp("http", 80))))
	assert.Equal(t, shapeFlat, p.shape)
	assert.False(t, p.wants[0].egress)

	p = planServices(planIn(exported("default", "portless", "true", true)))
	assert.Empty(t, p.wants)
	assert.Equal(t, []string{ReasonHeadlessWithoutPorts}, noticeReasons(p))

	in := planIn(exported("default", "web", "true", false, tcp("http", 80)))
	in.remote = nil
	assert.Empty(t, planServices(in).wants, "not exported: nothing wanted, so everything owned goes")
}

// A pod whose hostname is its Service's name would have the Service's own
// mirror as its per-pod mirror (a sync would delete and recreate it
// forever): it is refused with a reason, and the other pods are mirrored.
func TestPlanPodNamedLikeItsService(t *testing.T) {
	p := planServices(planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db", "db-0")))
	assert.Equal(t, []string{"db-west", "db-0-west"}, wantNames(p))
	assert.Equal(t, []string{ReasonPodNameCollides}, noticeReasons(p))
}

// A wanted name held by a Service that is not the key's: the mirror's own
// name means nothing at all is wanted (per-pod mirrors would belong to
// nothing DNS finds); a per-pod name leaves that pod out.
func TestPlanTakenNames(t *testing.T) {
	holder := &corev1.Service{}
	takenOnly := func(name string) func(string) *corev1.Service {
		return func(n string) *corev1.Service { return map[string]*corev1.Service{name: holder}[n] }
	}
	in := planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1"))
	in.taken = takenOnly("db-1-west")
	p := planServices(in)
	assert.Equal(t, []string{"db-west", "db-0-west"}, wantNames(p))
	assert.Equal(t, []*corev1.Service{holder}, p.conflicts)

	in.taken = takenOnly("db-west")
	p = planServices(in)
	assert.Empty(t, p.wants)
	assert.Len(t, p.conflicts, 1)
}

// Egress mirrors take the IP family of the egress addresses, so that
// kube-proxy uses their EndpointSlices; the headless mirror has no
// ClusterIP to choose.
func TestPlanEgressFamily(t *testing.T) {
	in := planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0"))
	in.egressFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	p := planServices(in)
	assert.Empty(t, p.wants[0].svc.Spec.IPFamilies)
	assert.Equal(t, []corev1.IPFamily{corev1.IPv6Protocol}, p.wants[1].svc.Spec.IPFamilies)
	assert.Equal(t, corev1.IPFamilyPolicySingleStack, *p.wants[1].svc.Spec.IPFamilyPolicy)

	v4 := p.wants[1].svc.DeepCopy()
	v4.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	assert.NotEmpty(t, replaceReason(v4, p.wants[1].svc), "the family of a ClusterIP cannot be updated")
	assert.Empty(t, replaceReason(p.wants[1].svc, p.wants[1].svc))
}

// PodGrace: a per-pod mirror whose endpoint is gone is kept, not ready,
// until the grace has passed since it was first seen missing.
func TestPlanPodGrace(t *testing.T) {
	remote := exported("default", "db", "true", true, tcp("http", 80))
	first := planServices(planIn(remote, endpoints("default", "db", "db-0", "db-1")))
	in := planIn(remote, endpoints("default", "db", "db-0"))
	in.podGrace = 30 * time.Second
	for _, w := range first.wants {
		in.owned[w.svc.Name] = w.svc
	}
	p := planServices(in)
	assert.Equal(t, []string{"db-west", "db-0-west", "db-1-west"}, wantNames(p))
	assert.False(t, p.wants[2].ready)
	assert.Equal(t, map[string]time.Time{"db-1-west": t0}, p.missing)
	assert.Equal(t, 30*time.Second, p.requeueAfter)

	in.missing, in.now = p.missing, t0.Add(31*time.Second)
	p = planServices(in)
	assert.Equal(t, []string{"db-west", "db-0-west"}, wantNames(p))
	assert.Empty(t, p.missing)
}

// A headless mirror stays headless while its remote endpoints have no
// hostname, for HeadlessGrace only: after that (a StatefulSet replaced by a
// Deployment for good) it becomes a ClusterIP mirror.
func TestPlanHeadlessGrace(t *testing.T) {
	remote := exported("default", "db", "true", true, tcp("http", 80))
	headless := planServices(planIn(remote, endpoints("default", "db", "db-0"))).wants[0].svc
	in := planIn(remote, endpoints("default", "db", ""))
	in.owned[headless.Name] = headless
	in.headlessGrace = 5 * time.Minute

	p := planServices(in)
	assert.Equal(t, shapeHeadless, p.shape)
	assert.Equal(t, t0, p.hostlessSince)
	assert.Equal(t, 5*time.Minute, p.requeueAfter, "synced again when the grace ends")

	in.hostlessSince, in.now = p.hostlessSince, t0.Add(4*time.Minute)
	p = planServices(in)
	assert.Equal(t, shapeHeadless, p.shape)
	assert.Equal(t, time.Minute, p.requeueAfter)

	in.now = t0.Add(5 * time.Minute)
	p = planServices(in)
	assert.Equal(t, shapeClusterIP, p.shape)
	assert.True(t, p.hostlessSince.IsZero())
	assert.NotEmpty(t, replaceReason(headless, p.wants[0].svc))

	// Hostnames back within the grace: the clock starts again next time.
	in.now, in.remoteSlices = t0.Add(time.Minute), []*discoveryv1.EndpointSlice{endpoints("default", "db", "db-0")}
	p = planServices(in)
	assert.Equal(t, shapeHeadless, p.shape)
	assert.True(t, p.hostlessSince.IsZero())
}

// live returns the wanted Services as if written, with ClusterIPs and
// every egress port.
func live(p plan) map[string]*corev1.Service {
	out := map[string]*corev1.Service{}
	for i, w := range p.wants {
		svc := w.svc.DeepCopy()
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		}
		if w.egress {
			svc.Annotations[labels.EgressPorts] = labels.FormatEgressPorts(map[string]int32{"80/TCP": int32(30000 + i)})
		}
		out[svc.Name] = svc
	}
	return out
}

func hostsN(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("db-%04d", i)
	}
	return out
}

// sliceHosts maps each slice name to its hostnames.
func sliceHosts(desired map[string]*discoveryv1.EndpointSlice) map[string][]string {
	out := map[string][]string{}
	for n, es := range desired {
		if es.Labels[discoveryv1.LabelServiceName] != "db-west" {
			continue // a per-pod mirror's egress slice
		}
		out[n] = []string{}
		for _, ep := range es.Endpoints {
			out[n] = append(out[n], *ep.Hostname)
		}
	}
	return out
}

// A headless mirror of more than 1000 pods is split as the EndpointSlice
// controller splits: at most 1000 endpoints per slice, every pod in one,
// and a change moves no endpoint that stays.
func TestPlanHeadlessSlicesSplit(t *testing.T) {
	remote := exported("default", "db", "true", true, tcp("http", 80))
	p := planServices(planIn(remote, endpoints("default", "db", hostsN(2500)...)))
	in := sliceInput{cluster: "west", ns: "default", name: "db", plan: p, live: live(p),
		owned: map[string]*discoveryv1.EndpointSlice{}, egress: []netip.Addr{egressIP}}
	desired, known := planSlices(in)
	assert.Len(t, known, 2501)
	got := sliceHosts(desired)
	assert.Equal(t, []string{"db-west", "db-west.2", "db-west.3"}, slices.Sorted(maps.Keys(got)))
	seen := map[string]bool{}
	for n, hosts := range got {
		assert.LessOrEqual(t, len(hosts), maxEndpointsPerSlice, n)
		for _, h := range hosts {
			assert.False(t, seen[h], "%s in two slices", h)
			seen[h] = true
		}
		assert.Equal(t, "db-west", desired[n].Labels[discoveryv1.LabelServiceName])
	}
	assert.Len(t, seen, 2500)

	// One pod goes from the first slice, another comes: only the first
	// slice changes (the newcomer takes the free place).
	hosts := append(hostsN(2500)[1:], "db-new")
	p2 := planServices(planIn(remote, endpoints("default", "db", hosts...)))
	in2 := in
	in2.plan, in2.live, in2.owned = p2, live(p2), desired
	desired2, _ := planSlices(in2)
	var changed []string
	for n, es := range sliceHosts(desired2) {
		if !slices.Equal(es, got[n]) {
			changed = append(changed, n)
		}
	}
	assert.Equal(t, []string{"db-west"}, changed)
	assert.Contains(t, sliceHosts(desired2)["db-west"], "db-new")

	// Down to a few pods: the extra slices are no longer desired.
	p3 := planServices(planIn(remote, endpoints("default", "db", "db-2400")))
	in3 := in
	in3.plan, in3.live, in3.owned = p3, live(p3), desired2
	desired3, known3 := planSlices(in3)
	assert.Equal(t, map[string][]string{"db-west": {}, "db-west.3": {"db-2400"}}, sliceHosts(desired3))
	del, _ := garbage(p3, nil, desired2, desired3, known3)
	assert.Contains(t, del, "db-west.2")
}

// A per-pod mirror without every egress port is not ready in the headless
// mirror's slice: traffic to it would go nowhere.
func TestPlanPodWithoutEgressPortNotReady(t *testing.T) {
	p := planServices(planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1")))
	l := live(p)
	delete(l["db-1-west"].Annotations, labels.EgressPorts)
	desired, _ := planSlices(sliceInput{cluster: "west", ns: "default", name: "db", plan: p, live: l, egress: []netip.Addr{egressIP}})
	require.Len(t, desired["db-west"].Endpoints, 2)
	assert.True(t, *desired["db-west"].Endpoints[0].Conditions.Ready, "db-0")
	assert.False(t, *desired["db-west"].Endpoints[1].Conditions.Ready, "db-1 has no egress port")
	assert.Nil(t, desired["db-1-west"], "and no egress slice")
}

// Garbage collection spares what the sync could not account for: the
// slices of a wanted Service whose state is unknown (its write failed, or
// its create found the name taken before the cache knew).
func TestGarbageSparesUnaccounted(t *testing.T) {
	p := planServices(planIn(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1")))
	l := live(p)
	all, _ := planSlices(sliceInput{cluster: "west", ns: "default", name: "db", plan: p, live: l, egress: []netip.Addr{egressIP}})
	require.Len(t, all, 3)
	owned := maps.Clone(l)
	owned["gone-west"] = &corev1.Service{}

	delete(l, "db-1-west") // its write failed
	desired, known := planSlices(sliceInput{cluster: "west", ns: "default", name: "db", plan: p, live: l, owned: all, egress: []netip.Addr{egressIP}})
	assert.False(t, known["db-1-west"])
	assert.Equal(t, all["db-west"].Endpoints, desired["db-west"].Endpoints, "db-1 keeps its endpoint in the headless mirror's slice")
	delSlices, delServices := garbage(p, owned, all, desired, known)
	assert.Empty(t, delSlices, "db-1-west's slice is not collected")
	assert.Equal(t, []string{"gone-west"}, delServices)

	// Not wanted any more: its slice goes with it.
	p.wants = p.wants[:2]
	delSlices, _ = garbage(p, owned, all, desired, known)
	assert.Equal(t, []string{"db-1-west"}, delSlices)
}

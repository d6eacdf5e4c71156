package mcmirror

import (
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The strings are Linkerd's (pkg/k8s/labels.go, the service mirror's
// federatedServiceName): a typo would silently answer nothing.
func TestFederatedLinkerdStrings(t *testing.T) {
	for got, want := range map[string]string{
		labels.Federated + "=" + labels.FederatedMember: "mirror.linkerd.io/federated=member",
		labels.RemoteDiscoveryAnnotation:                "multicluster.linkerd.io/remote-discovery",
		labels.LocalDiscoveryAnnotation:                 "multicluster.linkerd.io/local-discovery",
		"web-" + labels.FederatedSuffix:                 "web-federated",
	} {
		assert.Equal(t, want, got)
	}
}

// fedFixture: web-federated, whose members are web in east (this
// cluster: ClusterIP 10.96.5.5, one ready pod), in west (flat: two ready
// pods, one not ready), in paris (gateway mode) and in a cluster not
// linked.
func fedFixture() *indextest.Source {
	f := indextest.NewSource("paris", "west")
	f.AddMember("east", "default", "web", labels.Gateway, []string{"10.96.5.5"}, httpPort)
	f.AddSlice("east", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.0.0.5", true))
	f.AddMember("west", "default", "web", labels.Flat, []string{"10.100.0.7"}, httpPort)
	f.AddSlice("west", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.1.0.1", true), ep("", "10.1.0.2", true), ep("", "10.1.0.3", false))
	f.AddMember("paris", "default", "web", labels.Gateway, []string{"10.100.1.7"}, httpPort)
	f.AddSlice("paris", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.2.0.1", true))
	f.AddMirror("default", "web-paris", "paris", "", []string{"10.96.0.7"}, httpPort)
	f.Federate("web-federated", "web@paris,web@west,web@nowhere", "web")
	return f
}

// A federated Service answers its routable members' ready addresses, the
// local one first: the local member's ClusterIP, the flat ones' pods; not
// the gateway-mode member, nor a not-ready pod. SRV names each member, as
// -global does: the local Service by its own name, a linked cluster's
// member by <cluster>.<svc>-federated, which answers that member alone.
// The members, being federated and not exported, make no name of their
// own.
func TestFederatedAnswers(t *testing.T) {
	m := newTestPlugin(t, fedFixture(), 5, fall.Zero)
	const fed, west, local = "web-federated" + z, "west.web-federated" + z, "web" + z
	runSubtests(t, m, []test.Case{
		{Qname: fed, Qtype: dns.TypeA, Answer: []dns.RR{a(fed, "10.1.0.1"), a(fed, "10.1.0.2"), a(fed, "10.96.5.5")}},
		nodata(fed, dns.TypeAAAA),
		{Qname: fed, Qtype: dns.TypeSRV,
			Answer: []dns.RR{srv(fed, 50, 80, local), srv(fed, 50, 8080, west)},
			Extra:  []dns.RR{a(local, "10.96.5.5"), a(west, "10.1.0.1"), a(west, "10.1.0.2")}},
		{Qname: "_http._tcp." + fed, Qtype: dns.TypeSRV,
			Answer: []dns.RR{srv("_http._tcp."+fed, 50, 80, local), srv("_http._tcp."+fed, 50, 8080, west)},
			Extra:  []dns.RR{a(local, "10.96.5.5"), a(west, "10.1.0.1"), a(west, "10.1.0.2")}},
		{Qname: west, Qtype: dns.TypeA, Answer: []dns.RR{a(west, "10.1.0.1"), a(west, "10.1.0.2")}},
		nxdomain("paris.web-federated"+z, dns.TypeA), // gateway mode: out
		nxdomain("east.web-federated"+z, dns.TypeA),  // the local member is web itself
		nxdomain("_grpc._tcp."+fed, dns.TypeSRV),
		next("web-west" + z), // a federated member is not exported
		next("web-global" + z),
		next(local), // the kubernetes plugin's
	})
	// The local member leads, as in -global.
	got := ask(t, m, fed, dns.TypeA)
	assert.False(t, got == nil || got.Answer[0].(*dns.A).A.String() != "10.96.5.5",
		"the local member is not first: %v", got)
	counted := func() float64 {
		return testutil.ToFloat64(answers.WithLabelValues(index.KindFederated.String(), "NOERROR"))
	}
	before := counted()
	ask(t, m, fed, dns.TypeA)
	assert.Equal(t, before+1, counted(), "answers_total{kind=federated}")
}

// The name is claimed only while a member has a ready, routable address:
// else the next plugin answers it (the kubernetes plugin, the Service's
// own ClusterIP), whatever fallthrough says.
func TestFederatedNotClaimed(t *testing.T) {
	f := indextest.NewSource("paris", "west")
	f.AddMember("west", "default", "idle", labels.Flat, []string{"10.100.0.8"}, httpPort)
	f.AddSlice("west", "default", "idle", []object.Port{indextest.TargetPort}, ep("", "10.1.0.8", false))
	f.AddMember("paris", "default", "gw", labels.Gateway, []string{"10.100.1.8"}, httpPort)
	f.AddSlice("paris", "default", "gw", []object.Port{indextest.TargetPort}, ep("", "10.2.0.8", true))
	f.AddMirror("default", "gw-paris", "paris", "", []string{"10.96.0.8"}, httpPort)
	f.AddMember("east", "default", "lonely", labels.Gateway, []string{"10.96.5.8"}, httpPort)
	f.AddSlice("east", "default", "lonely", []object.Port{indextest.TargetPort}, ep("", "10.0.0.8", false))
	f.AddMember("west", "default", "empty", labels.Flat, []string{"10.100.0.9"}, httpPort)
	f.Federate("idle-federated", "idle@west", "-")       // no ready pod
	f.Federate("gw-federated", "gw@paris", "-")          // gateway mode only
	f.Federate("lonely-federated", "-", "lonely")        // a local ClusterIP without a ready pod
	f.Federate("ghost-federated", "ghost@west", "ghost") // members that do not exist
	f.Federate("empty-federated", "empty@west", "-")     // no slice at all
	f.Federate("bad-federated", "idle,@west", "Bad")     // nothing well formed
	m := newTestPlugin(t, f, 5, fall.Root)
	for _, n := range []string{"idle", "gw", "lonely", "ghost", "empty", "bad"} {
		runCase(t, m, next(n+"-federated"+z), false)
		runCase(t, m, next("west."+n+"-federated"+z), false)
	}
	assert.EqualValues(t, 0, m.index.Len(), "names in the index")
}

// Members that become unready or go away leave the answer; the last one
// gone, the name goes down the chain; back, it is answered again. Each
// change is of a member's objects: the federated group is rebuilt with
// the member's.
func TestFederatedMembersChange(t *testing.T) {
	f := fedFixture()
	m := newTestPlugin(t, f, 5, fall.Zero)
	fed := "web-federated" + z
	web := object.ServiceKey("default", "web")
	wantA := func(want ...string) {
		t.Helper()
		require.Equal(t, want, answerA(t, m, fed), fed)
	}
	wantA("10.1.0.1", "10.1.0.2", "10.96.5.5")

	// West's pods become unready: the local member alone.
	f.EndpointSlices[[3]string{"west", "default", "web"}] = nil
	f.AddSlice("west", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.1.0.1", false), ep("", "10.1.0.2", false))
	m.requeue(web)
	wantA("10.96.5.5")
	runCase(t, m, nxdomain("west.web-federated"+z, dns.TypeA), false)

	// The local pod becomes unready too: no ready member, not claimed.
	f.EndpointSlices[[3]string{"east", "default", "web"}] = nil
	f.AddSlice("east", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.0.0.5", false))
	m.requeue(web)
	runCase(t, m, next(fed), false)
	runCase(t, m, next("west.web-federated"+z), false)

	// West ready again.
	f.EndpointSlices[[3]string{"west", "default", "web"}] = nil
	f.AddSlice("west", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.1.0.4", true))
	m.requeue(web)
	wantA("10.1.0.4")

	// West's member goes (no longer federated nor exported): not claimed.
	delete(f.Members, [3]string{"west", "default", "web"})
	m.requeue(web)
	runCase(t, m, next(fed), false)

	// Back, and the local pod ready: both; then the federated Service
	// lists west no more, then goes.
	f.AddMember("west", "default", "web", labels.Flat, []string{"10.100.0.7"}, httpPort)
	f.EndpointSlices[[3]string{"east", "default", "web"}] = nil
	f.AddSlice("east", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.0.0.5", true))
	m.requeue(web)
	wantA("10.1.0.4", "10.96.5.5")
	f.Federate("web-federated", "web@paris", "web")
	m.requeue(object.FederatedKey("default", "web-federated"))
	wantA("10.96.5.5")
	delete(f.Mirrors, [2]string{"default", "web-federated"})
	m.requeue(object.FederatedKey("default", "web-federated"))
	runCase(t, m, next(fed), false)
	assert.EqualValues(t, 0, m.index.Len(), "names left in the index")
}

// A member exported by Linkerd's label besides being federated keeps its
// exported names; the federated name answers it in its export mode: flat,
// or, in gateway mode, not at all.
func TestFederatedMemberAlsoExported(t *testing.T) {
	f := indextest.NewSource("west")
	f.AddService("west", "default", "api", labels.Flat, []string{"10.100.0.5"}, httpPort)
	f.AddSlice("west", "default", "api", []object.Port{indextest.TargetPort}, ep("", "10.1.0.5", true))
	f.AddService("west", "default", "gw", labels.Gateway, []string{"10.100.0.6"}, httpPort)
	f.AddMirror("default", "gw-west", "west", "", []string{"10.96.0.6"}, httpPort)
	f.Federate("api-federated", "api@west", "-")
	f.Federate("gw-federated", "gw@west", "-")
	m := newTestPlugin(t, f, 5, fall.Zero)
	for _, tc := range []test.Case{
		{Qname: "api-federated" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("api-federated"+z, "10.1.0.5")}},
		{Qname: "api-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("api-west"+z, "10.1.0.5")}},
		next("gw-federated" + z),
		{Qname: "gw-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("gw-west"+z, "10.96.0.6")}},
	} {
		runCase(t, m, tc, false)
	}
}

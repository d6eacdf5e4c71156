package dns_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// A Linkerd federated Service, for clients outside the mesh. East holds
// web-federated as Linkerd's service mirror makes it (made here by hand: a
// mirror without a cluster name, a ClusterIP without endpoints, its
// members in its annotations): web of west, labelled a federated member
// only (Linkerd's federated mode: flat), web of paris, a member exported
// in gateway mode as well, and east's own web. coredns-mc in east answers
// web-federated with east's web ClusterIP and west's ready pods, not
// paris's; once no member is left, the name goes on to the kubernetes
// plugin, which answers the Service's own ClusterIP, as for Linkerd's
// meshed clients.
func TestFederatedService(t *testing.T) {
	ctx, east, west, paris := setUp(t)
	const ns = "federated"
	member := map[string]string{labels.Federated: labels.FederatedMember}
	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+"---\n"+plainService(t, ns, "web", member, nil)))
	require.NoError(t, west.Apply(ctx, readySlice(t, ns, "web", []string{"10.205.0.1", "10.205.0.2"}, "10.205.0.3")))
	require.NoError(t, paris.Apply(ctx, harness.Namespace(ns)+"---\n"+plainService(t, ns, "web",
		map[string]string{labels.Federated: labels.FederatedMember, labels.Exported: labels.ExportGateway}, nil)))
	require.NoError(t, paris.Apply(ctx, readySlice(t, ns, "web", []string{"10.205.1.1"})))
	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)+"---\n"+plainService(t, ns, "web", member, nil)))
	require.NoError(t, east.Apply(ctx, readySlice(t, ns, "web", []string{"10.205.2.1"})))
	require.NoError(t, east.Apply(ctx, plainService(t, ns, "web-federated",
		map[string]string{labels.MirroredService: labels.MirroredServiceValue},
		map[string]string{labels.RemoteDiscoveryAnnotation: "web@west,web@paris", labels.LocalDiscoveryAnnotation: "web"})))
	localWeb, fedIP := clusterIP(t, east, ns, "web"), clusterIP(t, east, ns, "web-federated")

	s := startDNS(t, []string{"west", "paris"})
	name := func(n string) string { return n + "." + ns + "." + zone }
	fed := name("web-federated")
	all := []string{"10.205.0.1", "10.205.0.2", localWeb}
	slices.Sort(all)
	eventuallyAnswers(t, s, fed, all)
	assert.ElementsMatch(t, all, s.Dig(t, fed), "dig")
	const counted = `coredns_mcmirror_answers_total{kind="federated",rcode="NOERROR"}`
	before := s.Value(t, counted)
	r := s.Ask(t, "udp", fed, dns.TypeA)
	require.Equal(t, dns.RcodeSuccess, r.Rcode)
	assert.Equal(t, localWeb, r.Answer[0].(*dns.A).A.String(), "the local member first")
	assert.Equal(t, before+1, s.Value(t, counted), "answered by mcmirror")

	// SRV as -global answers it: east's web by its own name, west's member
	// by west.web-federated, which answers west's pods; each with its glue.
	west1 := name("west.web-federated")
	r = s.Ask(t, "tcp", "_http._tcp."+fed, dns.TypeSRV)
	assert.Equal(t, []string{"80 " + name("web"), "80 " + west1}, harness.Answers(r))
	assert.Equal(t, map[string][]string{name("web"): {localWeb}, west1: {"10.205.0.1", "10.205.0.2"}}, glueAll(r))
	assert.Len(t, s.Dig(t, "SRV", fed), 2, "dig sees two members")
	assert.Equal(t, []string{"10.205.0.1", "10.205.0.2"}, harness.Answers(s.Ask(t, "udp", west1, dns.TypeA)))
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", name("paris.web-federated"), dns.TypeA).Rcode, "gateway mode: left out")
	// A federated member is not exported: no web-west here.
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", name("web-west"), dns.TypeA).Rcode)

	// West's web is no longer a member: east's alone.
	require.NoError(t, west.LabelService(ctx, ns, "web", labels.Federated, ""))
	eventuallyAnswers(t, s, fed, []string{localWeb})
	eventuallyRcode(t, s, west1, dns.RcodeNameError)
	// Nor east's: the kubernetes plugin answers the federated Service's
	// own ClusterIP, and mcmirror no longer counts it.
	require.NoError(t, east.LabelService(ctx, ns, "web", labels.Federated, ""))
	eventuallyAnswers(t, s, fed, []string{fedIP})
	before = s.Value(t, counted)
	assert.Equal(t, []string{fedIP}, s.Dig(t, fed), "dig")
	assert.Equal(t, before, s.Value(t, counted), "passed on to the kubernetes plugin")
	env.RequireAlive(t, s.Process)
}

// glueAll returns the A records of the additional section as name →
// addresses, sorted.
func glueAll(r *dns.Msg) map[string][]string {
	out := map[string][]string{}
	for _, rr := range r.Extra {
		if a, ok := rr.(*dns.A); ok {
			out[a.Hdr.Name] = append(out[a.Hdr.Name], a.A.String())
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// plainService is ClusterIP Service ns/name (port http 80) without a
// selector, with lbls and annotations.
func plainService(t *testing.T, ns, name string, lbls, ann map[string]string) string {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls, Annotations: ann},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// readySlice is the EndpointSlice of Service ns/svc (port http 80) with an
// endpoint per address, ready ones, then not-ready ones. Written by hand,
// it carries the member label itself.
func readySlice(t *testing.T, ns, svc string, ready []string, unready ...string) string {
	var eps []discoveryv1.Endpoint
	for i, ip := range append(slices.Clone(ready), unready...) {
		eps = append(eps, endpoint(ip, "", i < len(ready)))
	}
	return endpointSlice(t, ns, svc, svc+"-manual", map[string]string{labels.Federated: labels.FederatedMember}, eps...)
}

package dns_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// statefulSet is namespace ns with StatefulSet nginx-set behind headless
// nginx-svc (port http 80), labelled with export (none when empty).
func statefulSet(ns string, replicas int, export string) string {
	lbl := map[string]string{}
	if export != "" {
		lbl[labels.Exported] = export
	}
	return harness.Namespace(ns) + harness.StatefulSet(ns, "nginx-svc", "nginx-set", replicas, lbl)
}

// startDNS runs east's DNS for the test t: mcmirror, linked to remotes
// and with the lines block in its block, before kubernetes.
func startDNS(t *testing.T, remotes []string, block ...string) *harness.DNSServer {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: remotes, Parts: harness.FleetDNS, Block: block}).DNS
}

// setUp begins a test: t shows the logs of the fleet's processes if it
// fails; it gets a context and the clusters east, west and paris.
func setUp(t *testing.T) (ctx context.Context, east, west, paris *harness.Cluster) {
	env.LogOnFailure(t)
	return context.Background(), env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")
}

// source is how east's DNS learns what the linked clusters export: by
// watching each of them (direct, the default), or from the mirrors east's
// controller writes in east (import: `source import`, the controller with
// --mirror-flat-endpoints). The same name tests run with both.
type source struct {
	name    string
	imports bool
}

var sources = []source{{name: "direct"}, {name: "import", imports: true}}

// eachSource runs test once per source, as a subtest, in a namespace of
// its own: ns-direct, ns-import.
func eachSource(t *testing.T, ns string, test func(t *testing.T, src source, ns string)) {
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			env.LogOnFailure(t)
			test(t, src, ns+"-"+src.name)
		})
	}
}

// startController runs east's mirror controller, linked to remotes: as
// startController, writing the flat-mode mirrors' EndpointSlices too in
// import mode.
func (src source) startController(t *testing.T, remotes ...string) {
	t.Helper()
	o := harness.FleetOptions{Local: "east", Remotes: remotes, Parts: harness.FleetController, EgressPorts: "30000-39999"}
	if src.imports {
		o.Controller.Args = []string{"--mirror-flat-endpoints"}
	}
	env.StartFleet(t, o)
}

// startDNS runs east's DNS as startDNS does; in import mode it links no
// cluster and reads east's mirrors.
func (src source) startDNS(t *testing.T, remotes []string, block ...string) *harness.DNSServer {
	t.Helper()
	if src.imports {
		return startDNS(t, nil, append([]string{"source import"}, block...)...)
	}
	return startDNS(t, remotes, block...)
}

// waitMirrors waits until local holds exactly n per-pod mirrors of remote's
// headless Service ns/svc, each with a ClusterIP, and returns host →
// ClusterIP.
func waitMirrors(t *testing.T, local, remote *harness.Cluster, ns, svc string, n int) map[string]string {
	t.Helper()
	mirror, err := labels.MirrorName(svc, remote.Name)
	require.NoError(t, err)
	var ips map[string]string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := local.Client.CoreV1().Services(ns).List(context.Background(),
			metav1.ListOptions{LabelSelector: labels.HeadlessMirrorSvcName + "=" + mirror})
		require.NoError(c, err)
		ips = map[string]string{}
		for _, s := range list.Items {
			host, ok := strings.CutSuffix(s.Name, "-"+remote.Name)
			require.True(c, ok, "per-pod mirror %s", s.Name)
			require.NotEmpty(c, s.Spec.ClusterIP)
			ips[host] = s.Spec.ClusterIP
		}
		assert.Len(c, ips, n)
	}, 60*time.Second, 50*time.Millisecond, "%d mirrors of %s/%s in %s", n, ns, mirror, local.Name)
	return ips
}

// clusterIP returns the ClusterIP of Service ns/name in c, which must have
// one.
func clusterIP(t *testing.T, c *harness.Cluster, ns, name string) string {
	t.Helper()
	s, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, s.Spec.ClusterIP)
	return s.Spec.ClusterIP
}

// glue returns the A records of the additional section as name → address.
func glue(r *dns.Msg) map[string]string {
	out := map[string]string{}
	for _, rr := range r.Extra {
		if a, ok := rr.(*dns.A); ok {
			out[a.Hdr.Name] = a.A.String()
		}
	}
	return out
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	require.NoError(t, err)
	return a
}

// values returns the values of m, sorted.
func values(m map[string]string) []string { return slices.Sorted(maps.Values(m)) }

// exportHeadless applies, in c, namespace ns with headless Service svc
// (port http 80) exported in flat mode, and its EndpointSlices by hand:
// slices of perSlice ready endpoints, endpoint n named <svc>-<n> at
// addr(n).
func exportHeadless(t *testing.T, c *harness.Cluster, ns, svc string, slices, perSlice int, addr func(n int) string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Apply(ctx, selectorless(ns, svc)))
	for i := range slices {
		var eps []discoveryv1.Endpoint
		for j := range perSlice {
			n := i*perSlice + j
			eps = append(eps, endpoint(addr(n), fmt.Sprintf("%s-%d", svc, n), true))
		}
		exported := map[string]string{labels.Exported: labels.ExportFlat}
		require.NoError(t, c.Apply(ctx, endpointSlice(t, ns, svc, fmt.Sprintf("%s-%d", svc, i), exported, eps...)))
	}
}

// endpointSlice is EndpointSlice name of Service ns/svc (port http 80),
// written by hand: labelled lbls beside its own labels, with endpoints eps.
func endpointSlice(t *testing.T, ns, svc, name string, lbls map[string]string, eps ...discoveryv1.Endpoint) string {
	l := map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "e2e"}
	maps.Copy(l, lbls)
	b, err := json.Marshal(&discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(80)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	})
	require.NoError(t, err)
	return string(b)
}

// endpoint is an endpoint at addr named host, none when host is "".
func endpoint(addr, host string, ready bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	if host != "" {
		ep.Hostname = ptr.To(host)
	}
	return ep
}

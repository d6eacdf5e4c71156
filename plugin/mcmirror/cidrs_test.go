package mcmirror

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseCIDRs(t *testing.T) {
	tests := []struct {
		args      []string
		shouldErr string
	}{
		{[]string{"10.1.0.0/16"}, ""},
		{[]string{"10.1.0.0/16", "fd00:1::/64", "192.0.2.7/32"}, ""},
		{[]string{"10.1.0.5"}, `"10.1.0.5" is not a CIDR`},
		{[]string{"10.1.2.3/16"}, "host bits set; did you mean 10.1.0.0/16?"},
		{[]string{"10.1.0.0/33"}, "not a CIDR"},
		{[]string{"pods"}, "not a CIDR"},
	}
	for _, tc := range tests {
		got, err := parseCIDRs(tc.args)
		if tc.shouldErr == "" {
			if err != nil || len(got) != len(tc.args) {
				t.Errorf("%v: %v, %v", tc.args, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.shouldErr) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.shouldErr)
		}
	}
}

func TestCIDRsAllows(t *testing.T) {
	list, err := parseCIDRs([]string{"10.1.0.0/16", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	// Only IPv6 is allowed at large: an IPv4-mapped address is IPv4.
	v6, _ := parseCIDRs([]string{"::/0"})
	tests := []struct {
		l    cidrs
		ip   string
		want bool
	}{
		{nil, "10.96.0.1", true}, // no list: everything, as without allowed_cidrs
		{nil, "x", true},
		{list, "10.1.0.30", true},
		{list, "10.1.255.255", true},
		{list, "10.96.0.1", false}, // the local API server's ClusterIP
		{list, "169.254.169.254", false},
		{list, "fd00::20", true},
		{list, "fe80::1", false},
		{list, "::ffff:10.1.0.30", true}, // answered as A 10.1.0.30
		{list, "::ffff:10.96.0.1", false},
		{v6, "::ffff:10.96.0.1", false}, // would be A 10.96.0.1
		{v6, "2001:db8::1", true},
		{list, "not-an-ip", false},
	}
	for _, tc := range tests {
		if got := tc.l.allows(tc.ip); got != tc.want {
			t.Errorf("%v allows %s = %v, want %v", tc.l, tc.ip, got, tc.want)
		}
	}
}

func TestParseAllowedCIDRs(t *testing.T) {
	tests := []struct {
		input     string
		shouldErr string
	}{
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.0.0/16 fd00:1::/64\n}", ""},
		// A link Secret may bring a cluster not named in the Corefile.
		{"mcmirror {\ncluster east\nlink_secrets linkerd-multicluster\nallowed_cidrs paris 10.2.0.0/16\n}", ""},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west\n}", "Wrong argument count"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.2.3/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs west: \"10.1.2.3/16\" has host bits set"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.0.0/16\nallowed_cidrs west 10.2.0.0/16\n}", "Testfile:5 - Error during parsing: allowed_cidrs for \"west\" given twice"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs wst 10.1.0.0/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs: no link named \"wst\""},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs east 10.0.0.0/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs: \"east\" is this cluster"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs West_1 10.1.0.0/16\n}", "allowed_cidrs: "},
	}
	for _, tc := range tests {
		c := caddy.NewTestController("dns", tc.input)
		c.ServerBlockKeys = []string{"cluster.local.:53"}
		cfg, err := parse(c)
		if tc.shouldErr == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.input, err)
				continue
			}
			if len(cfg.allowed.lists) != 1 {
				t.Errorf("%q: lists %v", tc.input, cfg.allowed.lists)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.shouldErr) {
			t.Errorf("%q: error %v, want %q", tc.input, err, tc.shouldErr)
		}
	}
}

// A linked cluster with an allow-list has its flat-mode addresses outside
// it dropped from every name; one without a list is answered as before;
// each drop is counted and logged when it first shows.
func TestIndexAllowedCIDRs(t *testing.T) {
	src := newFakeSource("paris", "west")
	src.svc("west", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.slice("west", "default", "flat", []object.Port{httpPort},
		ep("", "10.1.0.30", true), ep("", "10.96.0.1", true), ep("", "::ffff:10.96.0.2", true),
		ep("", "10.96.0.9", false)) // not ready: never answered, so not a drop
	src.svc("west", "default", "db", labels.Flat, nil, httpPort)
	src.slice("west", "default", "db", []object.Port{httpPort}, ep("db-0", "10.1.0.40", true), ep("db-1", "10.96.0.1", true))
	src.svc("paris", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.slice("paris", "default", "flat", []object.Port{httpPort}, ep("", "10.96.0.1", true))

	m, err := newWithSource(src, Options{
		Zones:        []string{"cluster.local."},
		Cluster:      "east",
		TTL:          5,
		AllowedCIDRs: map[string][]netip.Prefix{"west": {netip.MustParsePrefix("10.1.0.0/16")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	west, paris := droppedAddresses.WithLabelValues("west"), droppedAddresses.WithLabelValues("paris")
	before, beforeParis := testutil.ToFloat64(west), testutil.ToFloat64(paris)
	syncAll(m, src)
	if got := testutil.ToFloat64(west) - before; got != 3 {
		t.Errorf("west: %v addresses counted dropped, want 3", got)
	}
	if got := testutil.ToFloat64(paris) - beforeParis; got != 0 {
		t.Errorf("paris has no list, yet %v dropped", got)
	}

	cases := []test.Case{
		{Qname: "flat-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("flat-west"+z, "10.1.0.30")}},
		nodata("flat-west"+z, dns.TypeAAAA),
		{Qname: "db-0.db-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("db-0.db-west"+z, "10.1.0.40")}},
		nxdomain("db-1.db-west"+z, dns.TypeA),
		{Qname: "db-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("db-west"+z, "10.1.0.40")}},
		// paris has no list: answered as before.
		{Qname: "flat-paris" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("flat-paris"+z, "10.96.0.1")}},
		{Qname: "flat-global" + z, Qtype: dns.TypeA, Answer: []dns.RR{
			a("flat-global"+z, "10.1.0.30"), a("flat-global"+z, "10.96.0.1")}},
	}
	for _, tc := range cases {
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := m.ServeDNS(t.Context(), rec, tc.Msg()); err != nil {
			t.Fatal(err)
		}
		if err := test.SortAndCheck(rec.Msg, tc); err != nil {
			t.Errorf("%s %s: %v", tc.Qname, dns.TypeToString[tc.Qtype], err)
		}
	}

	// A rebuild with nothing new counts nothing.
	mid := testutil.ToFloat64(west)
	m.index.sync(object.ServiceKey("default", "flat"))
	m.index.sync(object.ServiceKey("default", "db"))
	if got := testutil.ToFloat64(west); got != mid {
		t.Errorf("a rebuild counted %v more drops", got-mid)
	}
	// A slice that shows one more address outside counts that one.
	src.slices[[3]string{"west", "default", "flat"}][0].Endpoints = append(src.slices[[3]string{"west", "default", "flat"}][0].Endpoints,
		ep("", "192.168.0.1", true))
	m.index.sync(object.ServiceKey("default", "flat"))
	if got := testutil.ToFloat64(west) - mid; got != 1 {
		t.Errorf("one new address outside: %v counted", got)
	}
}

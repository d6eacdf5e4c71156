package dns_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// Odd and broken packets get from mcmirror what they get from CoreDNS's own
// kubernetes plugin, side by side in one coredns-mc: the same query is sent
// raw, over UDP and over TCP, once for a name mcmirror answers (west's pod,
// flat mode) and once for the same name in east, which the kubernetes
// plugin answers; the replies must have the same rcode and shape. After
// each case both names are still answered right.
//
// A second server block, on its own port, loads the chaos plugin, which
// makes CoreDNS pass classes other than IN down the plugin chain; on the
// first one the server itself refuses them.
func TestBadInputLikeKubernetes(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const ns = "badinput"
	require.NoError(t, east.Apply(ctx, statefulSet(ns, 1, "")))
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	eastIP := east.WaitEndpoints(t, ns, "nginx-svc", 1)["nginx-set-0"]
	westIP := west.WaitEndpoints(t, ns, "nginx-svc", 1)["nginx-set-0"]

	chaosPort := harness.FreePort(t)
	block := func(key, extra string) string {
		return fmt.Sprintf(`
%[1]s {
    bind 127.0.0.1
%[2]s    mcmirror cluster.local {
        cluster %[3]s
        kubeconfig %[4]s
%[5]s    }
    kubernetes cluster.local {
        kubeconfig %[4]s
    }
}
`, key, extra, east.Name, east.Kubeconfig, harness.LinkLines(t, west))
	}
	corefile := block(".", "    ready 127.0.0.1:{READY}\n    prometheus 127.0.0.1:{METRICS}\n") +
		block(fmt.Sprintf(".:%d", chaosPort), "    chaos\n")
	s := env.StartDNS(t, "east/coredns-mc", corefile)
	chaosAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(chaosPort))

	pair := [2]string{ // mcmirror's name, the kubernetes plugin's
		"nginx-set-0.nginx-svc-west." + ns + "." + zone,
		"nginx-set-0.nginx-svc." + ns + "." + zone,
	}
	want := [2]string{westIP, eastIP}
	eventuallyAnswers(t, s, pair[0], []string{westIP})

	query := func(name string, qtype uint16) *dns.Msg { return new(dns.Msg).SetQuestion(name, qtype) }
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		require.NoError(t, err)
		return b
	}
	withClass := func(class uint16) func(string) []byte {
		return func(name string) []byte {
			m := query(name, dns.TypeA)
			m.Question[0].Qclass = class
			return pack(m)
		}
	}
	// rawName writes name in wire format with no check of its length.
	rawName := func(name string) []byte {
		var b []byte
		for _, l := range dns.SplitDomainName(name) {
			b = append(append(b, byte(len(l))), l...)
		}
		return append(b, 0)
	}
	header := func(id uint16, qd int) []byte {
		h := make([]byte, 12)
		binary.BigEndian.PutUint16(h, id)
		h[2] = 0x01 // RD
		binary.BigEndian.PutUint16(h[4:], uint16(qd))
		return h
	}

	cases := []struct {
		name string
		// packet builds the packet for one of the two names.
		packet func(name string) []byte
		// addr is the server block: "" for the first one, "chaos".
		addr string
		// rcode is the rcode both must give; -1: no reply at all.
		rcode int
		// decides says who: the server before any plugin, or each plugin.
		decides string
	}{
		{"question cut short", func(n string) []byte { b := pack(query(n, dns.TypeA)); return b[:len(b)-3] }, "", dns.RcodeFormatError, "server"},
		{"compression pointer loop", func(string) []byte { return append(header(1001, 1), 0xc0, 12, 0, 1, 0, 1) }, "", dns.RcodeFormatError, "server"},
		{"label of 64 octets", func(n string) []byte {
			return append(append(header(1002, 1), rawName(strings.Repeat("a", 64)+"."+n)...), 0, 1, 0, 1)
		}, "", dns.RcodeFormatError, "server"},
		{"name of 300 octets", func(n string) []byte {
			return append(append(header(1003, 1), rawName(strings.Repeat("a.", 150)+n)...), 0, 1, 0, 1)
		}, "", dns.RcodeFormatError, "server"},
		{"header only, 5 octets", func(n string) []byte { return pack(query(n, dns.TypeA))[:5] }, "", -1, "server"},
		{"no question", func(string) []byte { return header(1004, 0) }, "", dns.RcodeFormatError, "server"},
		{"two questions", func(n string) []byte {
			m := query(n, dns.TypeA)
			m.Question = append(m.Question, m.Question[0])
			return pack(m)
		}, "", dns.RcodeFormatError, "server"},
		{"name of 255 octets below the pod", func(n string) []byte {
			return pack(query(strings.Repeat("a.", (254-len(n))/2)+n, dns.TypeA))
		}, "", dns.RcodeNameError, "plugin"},
		{"class CHAOS", withClass(dns.ClassCHAOS), "", dns.RcodeRefused, "server"},
		{"class ANY", withClass(dns.ClassANY), "", dns.RcodeRefused, "server"},
		{"class CHAOS, chaos plugin loaded", withClass(dns.ClassCHAOS), "chaos", dns.RcodeSuccess, "plugin"},
		{"class ANY, chaos plugin loaded", withClass(dns.ClassANY), "chaos", dns.RcodeSuccess, "plugin"},
		{"type ANY", func(n string) []byte { return pack(query(n, dns.TypeANY)) }, "", dns.RcodeSuccess, "plugin"},
		{"unknown type 65280", func(n string) []byte { return pack(query(n, 65280)) }, "", dns.RcodeSuccess, "plugin"},
		{"AXFR", func(n string) []byte { return pack(query(n, dns.TypeAXFR)) }, "", dns.RcodeRefused, "plugin"},
		{"IXFR", func(n string) []byte { return pack(query(n, dns.TypeIXFR)) }, "", dns.RcodeRefused, "plugin"},
		{"NOTIFY opcode", func(n string) []byte {
			m := query(n, dns.TypeA)
			m.Opcode = dns.OpcodeNotify
			return pack(m)
		}, "", dns.RcodeSuccess, "plugin"},
		{"UPDATE opcode", func(n string) []byte {
			m := new(dns.Msg).SetUpdate("cluster.local.")
			rr, err := dns.NewRR(n + " 5 IN A 192.0.2.1")
			require.NoError(t, err)
			m.Insert([]dns.RR{rr})
			return pack(m)
		}, "", dns.RcodeNotImplemented, "server"},
		{"EDNS version 1", func(n string) []byte {
			m := query(n, dns.TypeA)
			m.SetEdns0(1232, false)
			m.Extra[0].(*dns.OPT).SetVersion(1)
			return pack(m)
		}, "", dns.RcodeBadVers, "server"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := s.Addr
			if tc.addr == "chaos" {
				addr = chaosAddr
			}
			for _, network := range []string{"udp", "tcp"} {
				var shapes [2]string
				for i, name := range pair {
					r, err := rawExchange(network, addr, tc.packet(name), tc.rcode >= 0)
					require.NoError(t, err, "%s %s", network, name)
					if tc.rcode < 0 {
						continue // dropped, as miekg/dns drops what has no header
					}
					require.NotNil(t, r, "%s %s: a reply", network, name)
					want := tc.rcode
					if tc.addr == "chaos" && i == 0 {
						// mcmirror holds class IN only and refuses the
						// others; the kubernetes plugin ignores the class.
						want = dns.RcodeRefused
					}
					assert.Equal(t, dns.RcodeToString[want], dns.RcodeToString[r.Rcode], "%s %s (%s decides)", network, name, tc.decides)
					shapes[i] = shape(r)
				}
				if tc.addr != "chaos" {
					assert.Equal(t, shapes[1], shapes[0], "%s: mcmirror's reply has the kubernetes plugin's shape", network)
				}
				t.Logf("%s: %s (%s)", network, shapes[0], tc.decides)
			}
			// Both still answer, on both server blocks.
			for i, name := range pair {
				assert.Equal(t, []string{want[i]}, harness.Answers(s.Ask(t, "udp", name, dns.TypeA)), name)
				r, err := rawExchange("tcp", chaosAddr, pack(query(name, dns.TypeA)), true)
				require.NoError(t, err)
				require.NotNil(t, r)
				assert.Equal(t, []string{want[i]}, harness.Answers(r), name)
			}
			env.RequireAlive(t, s.Process)
		})
	}
}

// rawExchange sends pkt as it is and returns the reply. When the server
// must drop pkt (reply false), a good query follows it and rawExchange
// returns nil once that query's answer is the first to come back: over TCP,
// where one connection's queries are answered in order, that proves pkt
// gets no reply; over UDP it is the best evidence there is.
func rawExchange(network, addr string, pkt []byte, reply bool) (*dns.Msg, error) {
	c, err := dns.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.UDPSize = dns.MaxMsgSize // read a UDP reply whole, however long
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(pkt); err != nil {
		return nil, err
	}
	follow := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	if !reply {
		if err := c.WriteMsg(follow); err != nil {
			return nil, err
		}
	}
	r, err := c.ReadMsg()
	if err != nil {
		return nil, fmt.Errorf("no reply, or it does not parse: %w", err)
	}
	if !reply {
		if r.Id != follow.Id || len(r.Question) != 1 || r.Question[0].Name != follow.Question[0].Name {
			return nil, fmt.Errorf("a reply to a packet that should be dropped: %v", r)
		}
		return nil, nil
	}
	return r, nil
}

// shape is what must be the same in the two plugins' replies: everything
// but the names and addresses.
func shape(r *dns.Msg) string {
	types := func(rrs []dns.RR) []string {
		var out []string
		for _, rr := range rrs {
			out = append(out, dns.TypeToString[rr.Header().Rrtype]+"/"+dns.ClassToString[rr.Header().Class])
		}
		slices.Sort(out)
		return out
	}
	var q []string
	for _, x := range r.Question {
		q = append(q, dns.TypeToString[x.Qtype]+"/"+dns.ClassToString[x.Qclass])
	}
	return fmt.Sprintf("rcode=%s opcode=%s qr=%v aa=%v tc=%v rd=%v ra=%v question=%v answer=%v ns=%v extra=%v",
		dns.RcodeToString[r.Rcode], dns.OpcodeToString[r.Opcode], r.Response, r.Authoritative, r.Truncated,
		r.RecursionDesired, r.RecursionAvailable, q, types(r.Answer), types(r.Ns), types(r.Extra))
}

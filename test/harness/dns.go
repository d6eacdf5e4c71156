package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DNSServer is a running coredns-mc DNS server.
type DNSServer struct {
	// Addr is the DNS address, UDP and TCP, on 127.0.0.1.
	Addr string
	// MetricsURL is the prometheus plugin's /metrics.
	MetricsURL string
	// Process is the coredns-mc process.
	Process *Process

	readyURL string
}

// StartDNS runs coredns-mc with corefile for the test t and waits until it
// answers. In corefile, {READY} and {METRICS} are replaced by free ports for
// the ready and prometheus plugins; the server block's DNS port is given by
// -dns.port, so the block must not name one.
func (e *Env) StartDNS(t testing.TB, name, corefile string) *DNSServer {
	t.Helper()
	bin, err := CorednsMC()
	require.NoError(t, err)
	port, readyPort, metricsPort := freeDNSPort(t), freeDNSPort(t), freeDNSPort(t)
	corefile = strings.NewReplacer("{READY}", strconv.Itoa(readyPort), "{METRICS}", strconv.Itoa(metricsPort)).Replace(corefile)
	path := filepath.Join(t.TempDir(), "Corefile")
	require.NoError(t, os.WriteFile(path, []byte(corefile), 0o644))
	s := &DNSServer{
		Addr:       net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		readyURL:   fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort),
	}
	s.Process = e.StartProcess(t, name, nil, bin, "-conf", path, "-dns.port", strconv.Itoa(port))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := s.Process.Exited()
		require.False(c, done, "coredns-mc exited: %v\n%s", err, s.Process.Tail(20))
		if strings.Contains(corefile, "ready ") {
			resp, err := http.Get(s.readyURL)
			require.NoError(c, err)
			resp.Body.Close()
			require.Equal(c, http.StatusOK, resp.StatusCode)
		}
		// CoreDNS's ready plugin listens a moment before it knows which
		// plugins to ask, and the DNS listeners open last: only an answer
		// proves the server is up.
		r := s.Ask(c, "udp", "kubernetes.default.svc.cluster.local.", dns.TypeA)
		assert.Equal(c, dns.RcodeSuccess, r.Rcode)
	}, 60*time.Second, 50*time.Millisecond, "coredns-mc ready")
	return s
}

// Ask sends one query over network ("udp" or "tcp") and returns the reply.
// t may be a *testing.T or, inside EventuallyWithT, the collector.
func (s *DNSServer) Ask(t require.TestingT, network, name string, qtype uint16) *dns.Msg {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, s.Addr)
	require.NoError(t, err, "%s %s", name, dns.TypeToString[qtype])
	return r
}

// Dig runs the real dig against the server with +short and returns its
// output lines, sorted.
func (s *DNSServer) Dig(t testing.TB, args ...string) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr)
	argv := append([]string{"@" + host, "-p", port, "+short", "+time=5", "+tries=1"}, args...)
	out, err := exec.Command("dig", argv...).CombinedOutput()
	require.NoError(t, err, "dig %s: %s", strings.Join(argv, " "), out)
	text := strings.TrimSpace(string(out))
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	slices.Sort(lines)
	return lines
}

// Metric returns the value of the sample whose name and labels are exactly
// series, e.g. `coredns_mcmirror_link_synced{cluster="west"}`, and whether
// the server exports it.
func (s *DNSServer) Metric(t testing.TB, series string) (string, bool) {
	t.Helper()
	resp, err := http.Get(s.MetricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// freeDNSPort returns a port free for both UDP and TCP on 127.0.0.1.
func freeDNSPort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

// FreePort returns a port on 127.0.0.1 free for both UDP and TCP.
func FreePort(t testing.TB) int { t.Helper(); return freeDNSPort(t) }

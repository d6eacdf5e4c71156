package harness

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
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
	// Corefile is the path of the Corefile the server reads, its
	// placeholders replaced.
	Corefile string

	readyURL   string
	hasReady   bool   // the Corefile runs the ready plugin
	hasMetrics bool   // the Corefile's prometheus plugin listens on {METRICS}
	probe      string // a name the server must answer NOERROR once it serves
}

// DNSOptions are what StartDNSWith changes of the server StartDNS runs.
type DNSOptions struct {
	// Binary runs instead of coredns-mc, e.g. a stock CoreDNS.
	Binary string
	// Probe is a name the server must answer NOERROR before it counts as
	// serving (default kubernetes.default.svc.cluster.local).
	Probe string
}

// StartDNS runs coredns-mc with corefile for the test t and waits until it
// answers. In corefile, {READY} and {METRICS} are replaced by free ports for
// the ready and prometheus plugins, and {HOST} by 127.0.0.1, where they and
// the server listen; the server block's DNS port is given by -dns.port, so
// the block must not name one.
func (e *Env) StartDNS(t testing.TB, name, corefile string) *DNSServer {
	t.Helper()
	return e.StartDNSWith(t, name, corefile, DNSOptions{})
}

// StartDNSWith is StartDNS with the binary and the readiness probe of o.
func (e *Env) StartDNSWith(t testing.TB, name, corefile string, o DNSOptions) *DNSServer {
	t.Helper()
	s, err := e.launchDNS(t.Context(), name, nil, corefile, t.TempDir(), o, func(argv ...string) (*Process, error) {
		return e.StartProcess(t, name, nil, argv...), nil
	})
	require.NoError(t, err)
	return s
}

// LaunchDNS is StartDNS outside tests: the server runs until the
// environment stops.
func (e *Env) LaunchDNS(ctx context.Context, name, corefile string) (*DNSServer, error) {
	dir, err := e.tempDir(nil)
	if err != nil {
		return nil, err
	}
	return e.launchDNS(ctx, name, nil, corefile, dir, DNSOptions{}, func(argv ...string) (*Process, error) {
		return e.Launch(name, nil, argv...)
	})
}

// launchDNS writes corefile into dir, starts the server it describes with
// start, in the node of c on port 53 (where kube-system/kube-dns sends the
// queries of c's pods; {HOST} is the node's address) or, with c nil, on a
// free port of 127.0.0.1, and waits until it answers: until ctx's deadline
// when it has one (a fleet of many links lists for longer), else a minute.
func (e *Env) launchDNS(ctx context.Context, name string, c *Cluster, corefile, dir string, o DNSOptions, start func(...string) (*Process, error)) (*DNSServer, error) {
	host, port := netip.MustParseAddr("127.0.0.1"), 53
	if c != nil {
		host = c.NodeIP()
	} else {
		p, err := pickPort(true)
		if err != nil {
			return nil, err
		}
		port = p
	}
	s, argv, err := newDNSServer(host, port, corefile, dir, o)
	if err != nil {
		return nil, err
	}
	if s.Process, err = start(argv...); err != nil {
		return nil, err
	}
	wait := 60 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		// A server that exited fails at once, not after the wait.
		if done, err := s.Process.Exited(); done {
			return nil, fmt.Errorf("%s exited: %v\n%s", name, err, s.Process.Tail(20))
		}
		err := s.answers()
		if err == nil {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s not ready within %s: %v\n%s", name, wait.Round(time.Second), err, s.Process.Tail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newDNSServer writes corefile, with its placeholders replaced, into dir
// and returns the server it describes and the command that runs it.
func newDNSServer(host netip.Addr, port int, corefile, dir string, o DNSOptions) (*DNSServer, []string, error) {
	bin, probe := o.Binary, o.Probe
	if bin == "" {
		var err error
		if bin, err = CorednsMC(); err != nil {
			return nil, nil, err
		}
	}
	if probe == "" {
		probe = "kubernetes.default.svc.cluster.local."
	}
	readyPort, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	hasMetrics := strings.Contains(corefile, "{METRICS}")
	corefile = strings.NewReplacer("{READY}", strconv.Itoa(readyPort), "{METRICS}", strconv.Itoa(metricsPort), "{HOST}", host.String()).Replace(corefile)
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return nil, nil, err
	}
	h := host.String()
	s := &DNSServer{
		Addr:       net.JoinHostPort(h, strconv.Itoa(port)),
		MetricsURL: "http://" + net.JoinHostPort(h, strconv.Itoa(metricsPort)) + "/metrics",
		Corefile:   path,
		readyURL:   "http://" + net.JoinHostPort(h, strconv.Itoa(readyPort)) + "/ready",
		hasReady:   strings.Contains(corefile, "ready "),
		hasMetrics: hasMetrics,
		probe:      dns.Fqdn(probe),
	}
	return s, []string{bin, "-conf", path, "-dns.port", strconv.Itoa(port)}, nil
}

// EditCorefile rewrites the server's Corefile with what edit makes of it,
// by a rename, so that the reload plugin never reads half a file, and
// returns the new text.
func (s *DNSServer) EditCorefile(t testing.TB, edit func(string) string) string {
	t.Helper()
	old, err := os.ReadFile(s.Corefile)
	require.NoError(t, err)
	text := edit(string(old))
	tmp := s.Corefile + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(text), 0o644))
	require.NoError(t, os.Rename(tmp, s.Corefile))
	return text
}

// Ready says why the ready plugin does not answer 200 (the Corefile must
// run it; StartDNS's {READY} port), or nil.
func (s *DNSServer) Ready() error {
	if !s.hasReady {
		return fmt.Errorf("the Corefile runs no ready plugin")
	}
	return GetOK(s.readyURL)
}

// answers reports why the server is not serving yet, or nil.
func (s *DNSServer) answers() error {
	if s.hasReady {
		if err := GetOK(s.readyURL); err != nil {
			return err
		}
	}
	// CoreDNS serves on without metrics when their port is taken.
	if s.hasMetrics {
		if err := GetOK(s.MetricsURL); err != nil {
			return err
		}
	}
	// CoreDNS's ready plugin listens a moment before it knows which
	// plugins to ask, and the DNS listeners open last: only an answer
	// proves the server is up.
	m := new(dns.Msg)
	m.SetQuestion(s.probe, dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, s.Addr)
	if err != nil {
		return err
	}
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("%s: %s", s.probe, dns.RcodeToString[r.Rcode])
	}
	return nil
}

// Ask sends one query over network ("udp" or "tcp") and returns the reply.
// t may be a *testing.T or, inside EventuallyWithT, the collector.
func (s *DNSServer) Ask(t require.TestingT, network, name string, qtype uint16) *dns.Msg {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	return Ask(t, s.Addr, network, name, qtype)
}

// Ask sends one query to the DNS server at addr over network ("udp" or
// "tcp") and returns the reply. t may be a *testing.T or, inside
// EventuallyWithT, the collector.
func Ask(t require.TestingT, addr, network, name string, qtype uint16) *dns.Msg {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	require.NoError(t, err, "%s %s", name, dns.TypeToString[qtype])
	return r
}

// Answers returns the A and AAAA addresses, SRV "port target"s and PTR
// names of the answer section of r, sorted.
func Answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		case *dns.PTR:
			out = append(out, rr.Ptr)
		}
	}
	slices.Sort(out)
	return out
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
	for _, line := range s.Metrics(t) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// Metrics returns the lines of the server's Prometheus exposition.
func (s *DNSServer) Metrics(t testing.TB) []string {
	t.Helper()
	body, err := getBody(s.MetricsURL, 5*time.Second)
	require.NoError(t, err)
	return strings.Split(string(body), "\n")
}

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// pair is an egress of cluster east and an ingress of cluster west on
// loopback, with real TLS material, a fake resolver on the ingress side and
// a fake clientset holding east's mirror Services.
type pair struct {
	ca          *gatewaytest.CA
	dir         string
	east, west  *Certs
	ingress     *Ingress
	ingressAddr string
	resolver    *fakeResolver
	egress      *Egress
	client      *fake.Clientset
}

// fakeResolver maps destinations to targets.
type fakeResolver struct {
	mu      sync.Mutex
	targets map[Destination]netip.AddrPort
}

func (r *fakeResolver) Resolve(d Destination) (netip.AddrPort, Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.targets[d]; ok {
		return t, ""
	}
	return netip.AddrPort{}, ReasonNotExported
}

func (r *fakeResolver) HasSynced() bool { return true }

func (r *fakeResolver) set(d Destination, t netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets[d] = t
}

// web is the destination most tests use: port 80 of Service web.
var web = Destination{Namespace: "default", Service: "web", Port: 80}

// newPair starts the pair; configure, when given, adjusts the ingress and
// the egress before they start.
func newPair(t *testing.T, configure ...func(*Ingress, *Egress)) *pair {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &pair{dir: t.TempDir(), resolver: &fakeResolver{targets: map[Destination]netip.AddrPort{}}}
	var err error
	p.ca, err = gatewaytest.NewCA("test root")
	require.NoError(t, err)
	p.east = p.certs(t, "east", gatewaytest.Options{})
	p.west = p.certs(t, "west", gatewaytest.Options{})

	ln := listen(t)
	p.ingressAddr = ln.Addr().String()
	// Timeouts generous enough for a loaded machine; tests about them
	// set their own.
	p.ingress = &Ingress{Certs: p.west, Resolver: p.resolver, HandshakeTimeout: 10 * time.Second}
	p.client = remotetest.NewClientset()
	p.egress = &Egress{Certs: p.east, Peers: StaticPeers{"west": p.ingressAddr}, BindAddress: "127.0.0.1", DialTimeout: 10 * time.Second}
	for _, f := range configure {
		f(p.ingress, p.egress)
	}
	go func() { _ = p.ingress.Serve(ctx, ln) }()
	go func() { _ = p.egress.Run(ctx, p.client) }()
	require.Eventually(t, p.egress.Ready, 5*time.Second, 10*time.Millisecond)
	return p
}

func issue(t *testing.T, ca *gatewaytest.CA, cluster string, o gatewaytest.Options) *gatewaytest.Issued {
	t.Helper()
	is, err := ca.Issue(cluster, o)
	require.NoError(t, err)
	return is
}

func (p *pair) certs(t *testing.T, cluster string, o gatewaytest.Options) *Certs {
	t.Helper()
	files, err := p.ca.IssueFiles(p.dir, cluster, o)
	require.NoError(t, err)
	return load(t, files)
}

// mirrorService is a mirror Service of west's Service svc (per-pod when
// host is set) whose ports (Service port → egress port) are recorded in
// its annotation.
func mirrorService(name, svc, host string, ports map[int32]int32) *corev1.Service {
	l := map[string]string{
		labels.MirroredService: labels.MirroredServiceValue, labels.ClusterName: "west",
		labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: svc,
	}
	if host != "" {
		l[labels.RemoteHostname] = host
	}
	rec := map[string]int32{}
	for port, egressPort := range ports {
		rec[labels.EgressPortKey(port, "TCP")] = egressPort
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l,
		Annotations: map[string]string{labels.EgressPorts: labels.FormatEgressPorts(rec)}}}
}

// mirror records a mirror Service of west's Service svc (per-pod when host
// is set) whose port is served on a free egress port, and returns that port
// once the egress listens on it.
func (p *pair) mirror(t *testing.T, svc, host string, port int32) int32 {
	t.Helper()
	egressPort := freePort(t)
	name := svc + "-west"
	if host != "" {
		name = host + "-west"
	}
	p.create(t, mirrorService(name, svc, host, map[int32]int32{port: egressPort}))
	p.waitListening(t, egressPort, true)
	return egressPort
}

// serveWeb sends web to target and returns the egress port of its mirror.
func (p *pair) serveWeb(t *testing.T, target netip.AddrPort) int32 {
	t.Helper()
	p.resolver.set(web, target)
	return p.mirror(t, "web", "", 80)
}

// create writes the Service svc through the egress's clientset.
func (p *pair) create(t *testing.T, svc *corev1.Service) {
	t.Helper()
	_, err := p.client.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitListening waits until the egress listens on port (or no longer
// does), as it says itself: no connection is made, so that no metric moves.
func (p *pair) waitListening(t *testing.T, port int32, want bool) {
	t.Helper()
	require.Eventually(t, func() bool { return p.listening(port) == want },
		5*time.Second, 5*time.Millisecond, "egress listening on %d: want %v", port, want)
}

// listening reports whether the egress listens on port.
func (p *pair) listening(port int32) bool {
	p.egress.mu.Lock()
	defer p.egress.mu.Unlock()
	_, ok := p.egress.ln[port]
	return ok
}

// listen listens on a free loopback port until t ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveIngress serves in on a free loopback port until t ends, and returns
// its address.
func serveIngress(t *testing.T, in *Ingress) string {
	t.Helper()
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = in.Serve(ctx, ln) }()
	return ln.Addr().String()
}

func freePort(t *testing.T) int32 {
	t.Helper()
	ln := listen(t)
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// server is a target: a loopback listener whose connections are handled by
// a function. It counts the connections it accepted.
type server struct {
	addr  netip.AddrPort
	conns atomic.Int64
}

func startServer(t *testing.T, handle func(net.Conn)) *server {
	t.Helper()
	ln := listen(t)
	s := &server{addr: netip.MustParseAddrPort(ln.Addr().String())}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return s
}

func (s *server) count() int { return int(s.conns.Load()) }

// startEcho answers every connection with greeting, then echoes; it half-
// closes its side when the client does.
func startEcho(t *testing.T, greeting string) *server {
	return startServer(t, func(c net.Conn) {
		if greeting != "" {
			_, _ = io.WriteString(c, greeting)
		}
		_, _ = io.Copy(c, c)
		_ = c.(*net.TCPConn).CloseWrite()
	})
}

func dialEgress(t *testing.T, port int32) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", egressAddr(port))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// readAll reads c until its end, within d, and fails t on an error.
func readAll(t *testing.T, c net.Conn, d time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return b
}

// readGreeting reads len(want) bytes and checks them.
func readGreeting(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, want, string(got))
	_ = c.SetReadDeadline(time.Time{})
}

// requireReset reads from c, which the gateway is expected to reset at
// once: the read must end with a connection reset, not with our own
// deadline (a hang) and not with data.
func requireReset(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n, "read data from a connection that should have been reset")
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection hung instead of being reset: %v", err)
	require.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
}

// requireDialReset connects to addr and wants the connection reset at
// once: as it is set up (the reset may beat connect's return) or at the
// first read.
func requireDialReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		require.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
		return
	}
	defer c.Close()
	requireReset(t, c)
}

// requireDialResetCounted is requireDialReset, the reset counted once more
// in refusals_total under peer, direction and reason.
func requireDialResetCounted(t *testing.T, addr, peer, direction string, reason Reason) {
	t.Helper()
	before := refusals(peer, direction, reason)
	requireDialReset(t, addr)
	assert.Equal(t, before+1, refusals(peer, direction, reason),
		"refusals_total{peer=%q,direction=%s,reason=%s}", peer, direction, reason)
}

func egressAddr(port int32) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))) }

// requireRefused dials port and wants the connection refused: nothing
// listens there.
func requireRefused(t *testing.T, port int32) {
	t.Helper()
	c, err := net.Dial("tcp", egressAddr(port))
	if err == nil {
		c.Close()
	}
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial %d: want connection refused, got %v", port, err)
}

// clientTLS is a raw client configuration presenting is: for certificates
// that Certs would not load (another root, expired). The server is not
// verified; the test is about what the ingress accepts.
func clientTLS(t *testing.T, is *gatewaytest.Issued) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
}

// dialTLS opens a TLS connection to addr, closed when t ends, with a
// deadline 10 s away; its handshake is left to its first read or write.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// dialIngress opens a TLS connection to the ingress and completes the
// handshake.
func dialIngress(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	c := dialTLS(t, addr, cfg)
	require.NoError(t, c.Handshake())
	_ = c.SetDeadline(time.Time{})
	return c
}

// connect sends request (a CONNECT, or anything) on c and reads the
// ingress's answer.
func connect(t *testing.T, c net.Conn, request string) (*http.Response, *bufio.Reader) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := io.WriteString(c, request)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	_ = c.SetDeadline(time.Time{})
	return resp, br
}

// tunnel opens a stream through the ingress at addr to authority, as east,
// and returns it with the target's first line.
func (p *pair) tunnel(t *testing.T, addr, authority string) (*tls.Conn, *bufio.Reader, string) {
	t.Helper()
	c := dialIngress(t, addr, p.east.ClientConfig("west", nil))
	resp, br := connect(t, c, connectRequest(authority))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = c.SetReadDeadline(time.Now().Add(eventBound))
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Time{})
	return c, br, line
}

// requireRefusal connects to the ingress at addr with cfg (east's when
// nil), sends request and wants it refused with status and reason, counted
// once more under peer.
func (p *pair) requireRefusal(t *testing.T, addr string, cfg *tls.Config, request, peer string,
	status int, reason Reason) {
	t.Helper()
	if cfg == nil {
		cfg = p.east.ClientConfig("west", nil)
	}
	before := refusals(peer, DirectionIngress, reason)
	resp, _ := connect(t, dialIngress(t, addr, cfg), request)
	assert.Equal(t, status, resp.StatusCode)
	assert.Equal(t, string(reason), resp.Header.Get("X-Mcmirror-Reason"))
	assert.Equal(t, before+1, refusals(peer, DirectionIngress, reason),
		"refusals_total{peer=%q,reason=%q}", peer, reason)
}

// requireOpen checks that an established stream to an echo target still
// carries bytes.
func requireOpen(t *testing.T, c *tls.Conn, br *bufio.Reader, what string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(eventBound))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	_, err := io.WriteString(c, "still here\n")
	require.NoError(t, err, "%s: established stream cut", what)
	line, err := br.ReadString('\n')
	require.NoError(t, err, "%s: established stream cut", what)
	require.Equal(t, "still here\n", line, what)
}

func connectRequest(authority string) string {
	return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
}

// within returns what ch gives within d, and fails t, saying what never
// came (format and args), when it gives nothing.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, format string, args ...any) (v T) {
	t.Helper()
	select {
	case v = <-ch:
	case <-time.After(d):
		t.Fatalf(format, args...)
	}
	return v
}

func value(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// requireValue waits for a metric to read want: the gauges of the egress
// are set as it applies the mirrors, counters move as handlers end.
func requireValue(t *testing.T, g prometheus.Collector, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return value(g) == want }, 5*time.Second, 5*time.Millisecond,
		"metric: want %v, have %v", want, value(g))
}

func refusals(peer, direction string, r Reason) float64 {
	return value(refusalsTotal.WithLabelValues(peer, direction, string(r)))
}

func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, o.(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

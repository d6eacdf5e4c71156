package main

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
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// staticResolver is an ingress's view of what its cluster exports, fixed.
type staticResolver map[gateway.Destination]netip.AddrPort

func (r staticResolver) Resolve(d gateway.Destination) (netip.AddrPort, gateway.Reason) {
	if a, ok := r[d]; ok {
		return a, ""
	}
	return netip.AddrPort{}, gateway.ReasonNotExported
}

func (staticResolver) HasSynced() bool { return true }

var webDest = gateway.Destination{Namespace: "default", Service: "web", Port: 80}

// echoTarget greets every connection with "hi\n" and echoes it.
func echoTarget(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.WriteString(c, "hi\n")
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// westIngress serves, in this process, the ingress of cluster west, with
// the certificate files, which carries web.default:80 to target; it
// returns the ingress's address.
func westIngress(t *testing.T, files gateway.CertFiles, target netip.AddrPort) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	in := &gateway.Ingress{Certs: loadCerts(t, files), Resolver: staticResolver{webDest: target}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = in.Serve(ctx, ln) }()
	return ln.Addr().String()
}

// issued issues cluster's gateway certificate from ca into dir.
func issued(t *testing.T, ca *gatewaytest.CA, dir, cluster string) gateway.CertFiles {
	t.Helper()
	f, err := ca.IssueFiles(dir, cluster, gatewaytest.Options{})
	require.NoError(t, err)
	return gateway.CertFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}
}

func loadCerts(t *testing.T, files gateway.CertFiles) *gateway.Certs {
	t.Helper()
	certs, err := gateway.LoadCerts(files)
	require.NoError(t, err)
	return certs
}

// useMirrorOfWeb gives the gateways the test runs a local cluster with the
// mirror web-west, whose port 80 is egressPort.
func useMirrorOfWeb(t *testing.T, egressPort int32) {
	mirror := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-west", Namespace: "default",
		Labels: map[string]string{
			labels.MirroredService: labels.MirroredServiceValue, labels.ClusterName: "west",
			labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: "web",
		},
		Annotations: map[string]string{labels.EgressPorts: labels.FormatEgressPorts(map[string]int32{labels.EgressPortKey(80, "TCP"): egressPort})},
	}}
	old := newGatewayClient
	newGatewayClient = func(*rest.Config) (kubernetes.Interface, error) { return fake.NewClientset(mirror), nil }
	t.Cleanup(func() { newGatewayClient = old })
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// greeted connects to addr through the gateway and has a line echoed.
func greeted(addr string) (*net.TCPConn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if err := echoes(c, r, "hi\n", ""); err != nil {
		c.Close()
		return nil, nil, err
	}
	if err := echoes(c, r, "ping\n", "ping\n"); err != nil {
		c.Close()
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c.(*net.TCPConn), r, nil
}

// echoes sends msg (unless empty) and wants the line want back (msg when
// want is empty).
func echoes(c net.Conn, r *bufio.Reader, want, msg string) error {
	if msg != "" {
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != want {
		return errors.New("got " + strconv.Quote(line) + ", want " + strconv.Quote(want))
	}
	return nil
}

func readyz(metrics string) (int, string) {
	resp, err := http.Get("http://" + metrics + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// On SIGTERM the gateway (here its egress, the one under the mirrors'
// ClusterIPs) fails /readyz at once, still serves new connections for
// --drain-delay while endpoints catch up, then stops listening and lets
// open streams go on for --shutdown-grace; a stream still open then is
// reset, never ended as if it were complete. The process exits 0.
// eastEgress runs egressTo with east's certificate, from a new trust
// root, and west's ingress in this process in front of an echo target.
func eastEgress(t *testing.T, stopWithin time.Duration, args ...string) (egressAddr, metrics string, code <-chan int, exited *atomic.Bool) {
	t.Helper()
	dir, ca, east := eastFiles(t)
	return egressTo(t, stopWithin, westIngress(t, issued(t, ca, dir, "west"), echoTarget(t)), east.Args(), args...)
}

// egressTo runs runGateway, in this process, as east's egress (no
// ingress) with the certificate flags tlsArgs and args added: one mirror,
// web-west, on a free port, and west's ingress at westAddr. It returns the
// egress's address, the metrics address, runGateway's exit code and
// whether the test has seen it exit; at the end of the test it is stopped
// with SIGTERM and given stopWithin plus 10 s, and must exit 0.
func egressTo(t *testing.T, stopWithin time.Duration, westAddr string, tlsArgs []string, args ...string) (egressAddr, metrics string, code <-chan int, exited *atomic.Bool) {
	t.Helper()
	// SIGTERM is sent to this process: while the test runs, one that
	// arrives when runGateway does not listen (not yet, or no more) must
	// not end it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	t.Cleanup(func() { signal.Stop(sigs) })
	egressPort := int32(netip.MustParseAddrPort(freeAddr(t)).Port())
	egressAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(egressPort)))
	useMirrorOfWeb(t, egressPort)

	kc, _ := testKubeconfigs(t, t.TempDir())
	metrics = freeAddr(t)
	all := append([]string{"--cluster", "east", "--kubeconfig", kc}, tlsArgs...)
	all = append(all, "--ingress-address", "", "--egress-bind-address", "127.0.0.1", "--metrics-addr", metrics,
		"--peer", "west="+westAddr)
	all = append(all, args...)
	c := make(chan int, 1)
	go func() { c <- runGateway(all) }()
	exited = new(atomic.Bool)
	t.Cleanup(func() {
		if !exited.Load() {
			// Stop it, whatever the test's outcome.
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			select {
			case code := <-c:
				assert.Equal(t, 0, code, "the gateway's exit code")
			case <-time.After(stopWithin + 10*time.Second):
				t.Error("the gateway did not stop on SIGTERM")
			}
		}
		klog.Flush()
	})
	return egressAddr, metrics, c, exited
}

func TestGatewaySIGTERMDrainsThenResets(t *testing.T) {
	const drainDelay, grace = 3 * time.Second, 2 * time.Second
	egressAddr, metrics, code, exited := eastEgress(t, drainDelay+grace,
		"--drain-delay", drainDelay.String(), "--shutdown-grace", grace.String())
	require.Eventually(t, func() bool { st, _ := readyz(metrics); return st == http.StatusOK }, 20*time.Second, 20*time.Millisecond,
		"the gateway never became ready")
	var long *net.TCPConn
	var longR *bufio.Reader
	var err error
	require.Eventually(t, func() bool {
		long, longR, err = greeted(egressAddr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "no stream through the egress: %v", err)
	defer long.Close()

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	signalled := time.Now()
	require.Eventually(t, func() bool {
		st, body := readyz(metrics)
		return st == http.StatusServiceUnavailable && strings.Contains(body, "shutting down")
	}, drainDelay/2, 10*time.Millisecond, "/readyz does not fail at once")

	// Within the drain delay a new connection is served.
	c, r, err := greeted(egressAddr)
	require.NoError(t, err, "a connection during the drain delay was not served")
	require.Less(t, time.Since(signalled), drainDelay, "too slow to tell: the drain delay was over")
	require.NoError(t, c.CloseWrite())
	_, err = io.ReadAll(r)
	require.NoError(t, err, "a stream that ended in order must end with EOF")
	c.Close()

	// After it, the port is closed; the open stream goes on.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", egressAddr)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}, drainDelay+5*time.Second, 20*time.Millisecond, "the egress port still listens after the drain delay")
	_ = long.SetDeadline(time.Now().Add(5 * time.Second))
	require.NoError(t, echoes(long, longR, "after\n", "after\n"), "the open stream broke during the grace")

	// At the end of the grace it is reset: a read ends with ECONNRESET,
	// never with the EOF of a complete stream.
	_ = long.SetDeadline(time.Now().Add(grace + 10*time.Second))
	_, err = io.Copy(io.Discard, longR)
	require.False(t, err == nil, "the cut stream ended with a clean EOF, as a complete one would")
	require.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset at the end of the grace, got %v", err)
	assert.GreaterOrEqual(t, time.Since(signalled), drainDelay+grace-500*time.Millisecond, "reset before the grace was over")

	select {
	case c := <-code:
		exited.Store(true)
		assert.Equal(t, 0, c)
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not exit after the grace")
	}
}

// The same shutdown on an ingress: still served during the drain delay,
// then the listener closes, and a stream still open at the end of the
// grace is reset, at the egress's client too.
func TestShutdownIngressDrainsThenResets(t *testing.T) {
	const drainDelay, grace = 2 * time.Second, time.Second
	dir, ca, east := eastFiles(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	in := &gateway.Ingress{Certs: loadCerts(t, issued(t, ca, dir, "west")), Resolver: staticResolver{webDest: echoTarget(t)}}
	ctx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	errc := make(chan error, 1)
	go func() { errc <- in.Serve(ctx, ln) }()

	// A client of the ingress, as the egress is.
	eastCerts := loadCerts(t, gateway.CertFiles{Cert: east.Cert, Key: east.Key, CA: east.CA})
	tunnel := func() (net.Conn, *bufio.Reader, error) {
		raw, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return nil, nil, err
		}
		c := tls.Client(raw, eastCerts.ClientConfig("west", nil))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "CONNECT web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n"); err != nil {
			return nil, nil, err
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, errors.New(resp.Status)
		}
		if err := echoes(c, r, "hi\n", ""); err != nil {
			return nil, nil, err
		}
		_ = c.SetDeadline(time.Time{})
		return c, r, nil
	}
	long, longR, err := tunnel()
	require.NoError(t, err)
	defer long.Close()

	var draining atomic.Bool
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- shutdown(klog.Background(), drainDelay, grace, &draining, stopServing, errc, in, nil) }()
	require.Eventually(t, draining.Load, time.Second, time.Millisecond)
	c, _, err := tunnel()
	require.NoError(t, err, "a connection during the drain delay was not served")
	require.Less(t, time.Since(start), drainDelay, "too slow to tell: the drain delay was over")
	c.Close()
	require.Eventually(t, func() bool { return !in.Accepting() }, drainDelay+5*time.Second, 10*time.Millisecond)
	_, err = net.Dial("tcp", ln.Addr().String())
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "want refused after the drain delay, got %v", err)

	_ = long.SetDeadline(time.Now().Add(grace + 10*time.Second))
	_, err = io.Copy(io.Discard, longR)
	require.False(t, err == nil, "the cut stream ended with a clean EOF")
	require.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
	assert.Equal(t, 0, <-done)
}

// --drain-delay and --shutdown-grace may be 0, never negative.
func TestGatewayShutdownFlags(t *testing.T) {
	_, _, east := eastFiles(t)
	for _, flag := range []string{"--drain-delay", "--shutdown-grace"} {
		var code int
		out := stderrOf(t, func() { code = runGateway(append(append([]string{"--cluster", "east"}, east.Args()...), flag, "-1s")) })
		assert.Equal(t, 2, code, flag)
		assert.Contains(t, out, "must be positive", flag)
	}
}

package gateway_test

// West's real gateway under abuse at its ingress, while a legitimate client
// in east goes on using a mirror through east's egress: each abuse is
// refused and counted, the legitimate client sees no failure, the process
// lives on, and its descriptors and memory stay bounded.

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/test/harness"
)

const (
	// abuseMaxConns is west's --max-connections: a tenth of the burst.
	abuseMaxConns = 1000
	// abuseHandshakeTimeout is west's --handshake-timeout: how long a
	// slow-loris client or a silent connection may hold a place.
	abuseHandshakeTimeout = 3 * time.Second
	// abuseMaxHeader is west's --max-header-bytes.
	abuseMaxHeader = 4096
)

// legitLoop is a client of a mirror in east that connects, again and again,
// through east's egress and west's ingress to the echo pod, and checks each
// stream both ways (legitGreet).
//
// What the gateways promise it, and what they do not. A stream is
// established once the pod's greeting has come through: from then on it is
// never cut, whatever west is put through, and one that is cut fails the
// test. Before that, the attempt is a connection west holds as pending (its
// TLS handshake, its CONNECT request), and when every place is taken, the
// oldest pending connection gives its place to a newcomer: during a burst
// that outruns a handshake on a starved machine, the legitimate client's
// connection can be that one. It sees its attempt closed before the
// greeting, and tries again, as any client of a Service would. Such an
// attempt is counted, logged, and allowed only while a phase that fills
// west's places runs (the burst); anywhere else, and after the burst has
// passed, it fails the test like a cut stream.
type legitLoop struct {
	ok   atomic.Int64
	mu   sync.Mutex
	fail []legitFailure
	stop chan struct{}
	done chan struct{}
}

// legitFailure is one attempt of the loop that failed.
type legitFailure struct {
	at          time.Time
	established bool // the greeting had come through: a cut stream
	err         error
}

func (f legitFailure) String() string {
	what := "not established"
	if f.established {
		what = "established stream cut"
	}
	return fmt.Sprintf("%s %s: %v", f.at.Format("15:04:05.000"), what, f.err)
}

func startLegitLoop(addr string) *legitLoop {
	l := &legitLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if _, established, err := greetStream(addr); err != nil {
				l.mu.Lock()
				l.fail = append(l.fail, legitFailure{time.Now(), established, err})
				l.mu.Unlock()
				continue
			}
			l.ok.Add(1)
		}
	}()
	return l
}

// during runs f and requires that the loop carried streams while it ran
// (positive evidence that the legitimate client was served meanwhile) and
// that none of its attempts failed. f evicts nothing.
func (l *legitLoop) during(t *testing.T, what string, f func()) {
	t.Helper()
	l.duringEvicting(t, what, func() time.Time { f(); return time.Time{} })
}

// duringEvicting is during for an f that fills west's places: attempts
// that fail before they are established are allowed up to the moment f
// returns (until which pending connections may be evicted), counted and
// logged; any later, and any cut stream, fails t.
func (l *legitLoop) duringEvicting(t *testing.T, what string, f func() (evictUntil time.Time)) {
	t.Helper()
	l.mu.Lock()
	first := len(l.fail)
	l.mu.Unlock()
	before := l.ok.Load()
	until := f()
	// At least one stream that began after f ended, as proof that the
	// loop is alive and has seen what f left behind.
	after := l.ok.Load()
	require.Eventually(t, func() bool { return l.ok.Load() > after+1 }, wait, tick, "the legitimate client made no progress after %s", what)
	l.mu.Lock()
	failed := slices.Clone(l.fail[first:])
	l.mu.Unlock()
	var evicted, wrong []legitFailure
	for _, fl := range failed {
		if !fl.established && !fl.at.After(until) {
			evicted = append(evicted, fl)
		} else {
			wrong = append(wrong, fl)
		}
	}
	t.Logf("%s: the legitimate client completed %d streams meanwhile; %d attempts not established while west's places were full (retried)", what, l.ok.Load()-before, len(evicted))
	if len(evicted) > 0 {
		t.Logf("the first of them: %v", evicted[:min(len(evicted), 5)])
	}
	require.Empty(t, wrong[:min(len(wrong), 5)], "%s: the legitimate client failed %d times (a cut stream, or an attempt refused while places were free); the first ones", what, len(wrong))
}

// subtest runs f as t's subtest name, during which the loop must carry on.
func (l *legitLoop) subtest(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) { l.during(t, name, func() { f(t) }) })
}

func (l *legitLoop) end() {
	close(l.stop)
	<-l.done
}

// readProcStats reads a process's resident memory and open descriptors.
func readProcStats(pid int) (rssKB, fds int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if rssKB, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); err != nil {
				return 0, 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
		}
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssKB, len(entries), err
}

func procStats(t require.TestingT, pid int) (rssKB, fds int) {
	rssKB, fds, err := readProcStats(pid)
	require.NoError(t, err)
	return rssKB, fds
}

// ingressClient talks to west's ingress directly, as the gateway of the
// cluster its certificate names.
type ingressClient struct {
	addr string
	cfg  *tls.Config
}

func newIngressClient(t *testing.T, addr string, f gatewaytest.Files) *ingressClient {
	t.Helper()
	certs, err := gateway.LoadCerts(gateway.CertFiles{Cert: f.Cert, Key: f.Key, CA: f.CA})
	require.NoError(t, err)
	// A session cache, as a scanner would keep to go faster.
	return &ingressClient{addr: addr, cfg: certs.ClientConfig("west", tls.NewLRUClientSessionCache(16))}
}

func (c *ingressClient) dial() (*tls.Conn, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", c.addr, c.cfg)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return conn, nil
}

// ask sends request and returns the ingress's status and reason.
func (c *ingressClient) ask(request string) (int, string, error) {
	conn, err := c.dial()
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("X-Mcmirror-Reason"), nil
}

func connectTo(authority string) string {
	return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
}

// parallel runs f(i) for i in [0, n) on workers goroutines and returns the
// errors.
func parallel(n, workers int, f func(i int) error) []error {
	var mu sync.Mutex
	var errs []error
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("#%d: %w", i, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// expectRefusals runs n requests (request(i)) against the ingress with
// client c, each answered with status and reason, and requires
// refusals_total{peer, direction=ingress, reason} of west to move by n.
func expectRefusals(t *testing.T, west *harness.Gateway, c *ingressClient, peer string, n, status int, reason gateway.Reason, request func(i int) string) {
	t.Helper()
	lbl := map[string]string{"peer": peer, "direction": "ingress", "reason": string(reason)}
	before := metric(t, west, "coredns_mcmirror_gateway_refusals_total", lbl)
	errs := parallel(n, 8, func(i int) error {
		st, why, err := c.ask(request(i))
		switch {
		case err != nil:
			return err
		case st != status || why != string(reason):
			return fmt.Errorf("answered %d %s, want %d %s", st, why, status, reason)
		}
		return nil
	})
	require.Empty(t, errs)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, before+float64(n), metric(ct, west, "coredns_mcmirror_gateway_refusals_total", lbl), "refusals_total%v", lbl)
	}, 10*time.Second, tick)
}

// West's gateway, allowing east only, with a tenth of the burst as its
// --max-connections, is abused at its ingress while east's client uses a
// mirror of west's web through both gateways: requests for unexported
// Services, a port scan of 1,000 destinations, slow-loris clients, oversized
// requests, a cluster that is not linked, and a burst of 10,000
// connections. Each abuse is refused and counted, the legitimate client
// sees no failure, the gateway lives on, its descriptors never exceed its
// bound, and its memory is logged before and after and stays under the
// Deployment's limit (1 GiB).
func TestIngressUnderAbuse(t *testing.T) {
	ns := env.UniqueNamespace(t, "gw-abuse")
	westC := env.Cluster("west")
	pods := westC.RunEchoPods(t, podPort, "abuse-web-0")
	// Clients of west's ingress: east, as east's egress is, and paris.
	clientTLS := env.GatewayTLS(t, "east", "paris")

	f := startFleet(t,
		"--max-connections", strconv.Itoa(abuseMaxConns),
		"--handshake-timeout", abuseHandshakeTimeout.String(),
		"--max-header-bytes", strconv.Itoa(abuseMaxHeader),
		"--v", "1")
	west, east := f.Gateways["west"], f.Gateways["east"]
	exportService(t, ns, "web", false, pods, nil)
	// An unexported Service with a ready endpoint: the pod.
	westC.CreateSelectorless(t, ns, "secret", harness.SelectorlessService{Port: servicePort, TargetPort: podPort, Endpoints: harness.PodAddrs(pods)})
	m := waitMirror(t, ns, "web-west")
	addr := m.addr()
	waitGreet(t, addr, wait, "web-west is reached before the abuse")

	pid := west.Process().PID
	rssBefore, fdsBefore := procStats(t, pid)
	t.Logf("west's gateway before: RSS %d KiB, %d fds", rssBefore, fdsBefore)
	rssPeaks := sampleMax(5*time.Millisecond, func() (float64, bool) { rss, _, err := readProcStats(pid); return float64(rss), err == nil })
	fdsPeaks := sampleMax(5*time.Millisecond, func() (float64, bool) { _, fds, err := readProcStats(pid); return float64(fds), err == nil })
	legit := startLegitLoop(addr)
	defer legit.end()
	asEast := newIngressClient(t, west.IngressAddr, clientTLS["east"])

	legit.subtest(t, "unexported targets", func(t *testing.T) {
		expectRefusals(t, west, asEast, "east", 200, http.StatusForbidden, gateway.ReasonNotExported, func(i int) string {
			if i%2 == 0 {
				return connectTo("secret." + ns + ":80")
			}
			return connectTo("kubernetes.default:443")
		})
	})

	// One client, 1,000 destinations: ports of the exported Service that
	// it does not export, and Services that do not exist. Every one
	// refused, told apart only as far as the README says.
	legit.subtest(t, "port scan", func(t *testing.T) {
		expectRefusals(t, west, asEast, "east", 500, http.StatusForbidden, gateway.ReasonPortNotExposed, func(i int) string {
			return connectTo(fmt.Sprintf("web.%s:%d", ns, 1000+i))
		})
		expectRefusals(t, west, asEast, "east", 500, http.StatusForbidden, gateway.ReasonNotExported, func(i int) string {
			return connectTo(fmt.Sprintf("svc-%d.%s:80", i, ns))
		})
	})

	legit.subtest(t, "cluster not linked", func(t *testing.T) {
		asParis := newIngressClient(t, west.IngressAddr, clientTLS["paris"])
		expectRefusals(t, west, asParis, "paris", 100, http.StatusForbidden, gateway.ReasonClusterNotAllowed, func(i int) string {
			if i%10 == 0 {
				return "GET " + gateway.ProbePath + " HTTP/1.1\r\nHost: west\r\n\r\n"
			}
			return connectTo("web." + ns + ":80")
		})
	})

	legit.subtest(t, "oversized requests", func(t *testing.T) {
		expectRefusals(t, west, asEast, "east", 100, http.StatusRequestHeaderFieldsTooLarge, gateway.ReasonHeaderTooLarge, func(i int) string {
			return "CONNECT web." + ns + ":80 HTTP/1.1\r\nHost: web." + ns + ":80\r\nX-Pad: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
		})
	})

	// Clients that finish their handshake and trickle their request a
	// byte at a time, and clients that never start TLS: each is dropped
	// once --handshake-timeout has passed, the first with 408.
	t.Run("slow loris", func(t *testing.T) {
		const n = 200
		timeouts := map[string]string{"peer": "east", "direction": "ingress", "reason": string(gateway.ReasonHeaderTimeout)}
		hsFailures := map[string]string{"direction": "ingress"}
		timeoutsBefore := metric(t, west, "coredns_mcmirror_gateway_refusals_total", timeouts)
		hsBefore := metric(t, west, "coredns_mcmirror_gateway_tls_handshake_failures_total", hsFailures)
		legit.during(t, "slow loris", func() {
			errs := parallel(2*n, 2*n, func(i int) error {
				if i%2 == 1 {
					return silentClient(west.IngressAddr)
				}
				return trickleClient(asEast, "web."+ns+":80")
			})
			require.Empty(t, errs)
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, timeoutsBefore+n, metric(c, west, "coredns_mcmirror_gateway_refusals_total", timeouts), "header_timeout refusals")
			assert.Equal(c, hsBefore+n, metric(c, west, "coredns_mcmirror_gateway_tls_handshake_failures_total", hsFailures), "handshake failures")
		}, 10*time.Second, tick)
	})

	// 10,000 connections opened as fast as 64 workers can, each held
	// open without a byte sent. West holds at most --max-connections at
	// once: each newcomer takes the place of the oldest that has not
	// finished its handshake, which is closed at once; the last ones
	// are dropped at --handshake-timeout. None is left hanging.
	t.Run("burst of 10000 connections", func(t *testing.T) {
		const n = 10000
		// Unidentified: evicted before a certificate was seen.
		evictedLbl := map[string]string{"peer": "", "direction": "ingress", "reason": string(gateway.ReasonEvicted)}
		hsFailures := map[string]string{"direction": "ingress"}
		evictedBefore := metric(t, west, "coredns_mcmirror_gateway_refusals_total", evictedLbl)
		hsBefore := metric(t, west, "coredns_mcmirror_gateway_tls_handshake_failures_total", hsFailures)
		var conns [n]net.Conn
		legit.duringEvicting(t, "the burst", func() time.Time {
			start := time.Now()
			errs := parallel(n, 64, func(i int) error {
				c, err := net.DialTimeout("tcp", west.IngressAddr, 30*time.Second)
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return nil // reset as it connected: refused, and fast
				}
				conns[i] = c
				return err
			})
			require.Empty(t, errs, "connections that did not get through in 30 s")
			opened := time.Since(start)
			// From here no newcomer of the burst takes a place: a
			// pending connection of the legitimate client's is evicted
			// no more; a handshake the burst disturbed ends within the
			// client's 10 s deadline.
			evictUntil := time.Now().Add(10 * time.Second)
			// Each is closed by west: evicted, or dropped at the
			// handshake timeout.
			errs = parallel(n, 64, func(i int) error {
				if conns[i] == nil {
					return nil
				}
				return dropped(conns[i])
			})
			require.Empty(t, errs)
			t.Logf("%d connections opened in %v, all closed by west after %v", n, opened.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			return evictUntil
		})
		evicted := metric(t, west, "coredns_mcmirror_gateway_refusals_total", evictedLbl) - evictedBefore
		var dropped float64
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			dropped = metric(c, west, "coredns_mcmirror_gateway_tls_handshake_failures_total", hsFailures) - hsBefore
			assert.Equal(c, float64(n), evicted+dropped, "every connection of the burst evicted or dropped at the timeout")
		}, 10*time.Second, tick)
		t.Logf("of %d: %v evicted for newer connections, %v dropped at the handshake timeout", n, evicted, dropped)
		assert.GreaterOrEqual(t, evicted, float64(n-abuseMaxConns), "evictions")
	})

	rssPeak, fdsPeak := int(rssPeaks.end()), int(fdsPeaks.end())
	env.RequireAlive(t, west.Process())
	env.RequireAlive(t, east.Process())
	// Every failure of the legitimate client was judged by the phase it
	// fell in (during, duringEvicting).
	// Back to where it was: nothing held after the abuse.
	var rssAfter, fdsAfter int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rssAfter, fdsAfter = procStats(c, pid)
		assert.LessOrEqual(c, fdsAfter, fdsBefore+10, "west's fds after the abuse")
	}, 30*time.Second, tick)
	t.Logf("west's gateway: RSS %d KiB before, %d KiB at the peak, %d KiB after; fds %d before, %d at the peak, %d after",
		rssBefore, rssPeak, rssAfter, fdsBefore, fdsPeak, fdsAfter)
	assert.LessOrEqual(t, fdsPeak, fdsBefore+abuseMaxConns+64, "west's fds: bounded by --max-connections (the legitimate streams and a dial each on top)")
	assert.Less(t, rssPeak, 1<<20, "west's RSS at the peak: under the Deployment's 1 GiB limit (KiB)")
}

// silentClient connects and never sends a byte; west must drop it at the
// handshake timeout, neither sooner than a moment nor never.
func silentClient(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return err
	}
	return dropped(c)
}

// dropped waits for west to close c, a connection that sent nothing, at
// the handshake timeout (with room to spare), and closes it.
func dropped(c net.Conn) error {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(abuseHandshakeTimeout + 30*time.Second))
	b := make([]byte, 1)
	if _, err := c.Read(b); errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("still open: the connection hangs")
	} else if err == nil {
		return fmt.Errorf("west sent %q to a client that said nothing", b)
	}
	return nil
}

// trickleClient completes the TLS handshake and sends a CONNECT request a
// byte every 100 ms, never finishing; west must answer 408 header_timeout.
func trickleClient(c *ingressClient, authority string) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(abuseHandshakeTimeout + 30*time.Second))
	answered := make(chan *http.Response, 1)
	go func() {
		resp, _ := http.ReadResponse(bufio.NewReader(conn), nil)
		answered <- resp
	}()
	req := "CONNECT " + authority + " HTTP/1.1\r\nX-Slow: " + strings.Repeat("z", 4000)
	for i := 0; ; i++ {
		select {
		case resp := <-answered:
			if resp == nil {
				return errors.New("dropped without an answer")
			}
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Mcmirror-Reason") != string(gateway.ReasonHeaderTimeout) {
				return fmt.Errorf("answered %s %s, want 408 %s", resp.Status, resp.Header.Get("X-Mcmirror-Reason"), gateway.ReasonHeaderTimeout)
			}
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		if i >= len(req) {
			return errors.New("west read the whole trickled request")
		}
		if _, err := conn.Write([]byte{req[i]}); err != nil {
			select {
			case resp := <-answered:
				if resp != nil && resp.StatusCode == http.StatusRequestTimeout {
					return nil
				}
			case <-time.After(5 * time.Second):
			}
			return fmt.Errorf("write: %w", err)
		}
	}
}

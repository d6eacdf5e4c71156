package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// westObjects is what cluster west has, every endpoint at target (a
// loopback server: the fake clientset, unlike an API server, takes
// loopback endpoints):
//
//	web     exported (gateway), ClusterIP, port 80 "http"
//	db      exported (gateway), headless, port 80, pod db-0
//	secret  not exported
//	flat    exported in flat mode
//	web-paris  a mirror (which carries the export label too)
//	empty   exported, its one endpoint not ready
//	down    exported, its endpoint a port nothing listens on
func westObjects(target, down int32) []runtime.Object {
	var objs []runtime.Object
	port80 := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	for i, o := range []struct {
		name, mode, host string
		port             int32
		ready            bool
	}{
		{"web", labels.ExportGateway, "", target, true},
		{"db", labels.ExportGateway, "db-0", target, true},
		{"secret", "", "", target, true},
		{"flat", labels.ExportFlat, "", target, true},
		{"web-paris", labels.ExportGateway, "", target, true},
		{"empty", labels.ExportGateway, "", target, false},
		{"down", labels.ExportGateway, "", down, true},
	} {
		svc := exportedService(o.name, fmt.Sprintf("10.96.0.%d", 10+i), port80)
		svc.Labels = map[string]string{labels.Exported: o.mode}
		switch o.name {
		case "db":
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		case "secret":
			svc.Labels = nil
		case "web-paris":
			svc.Labels[labels.MirroredService] = labels.MirroredServiceValue
		}
		endpoint := ep{addr: "127.0.0.1", host: o.host, ready: new(o.ready)}
		objs = append(objs, svc, endpointSlice(o.name, o.name+"-x1", "http", o.port, endpoint))
	}
	return objs
}

// exportsPair is a pair whose ingress decides from real Exports over a
// fake clientset holding westObjects, every endpoint at one echo server.
func exportsPair(t *testing.T, configure ...func(*Ingress, *Egress)) (*pair, *server) {
	t.Helper()
	target := startEcho(t, "west here\n")
	client := remotetest.NewClientset(westObjects(int32(target.addr.Port()), freePort(t))...)
	// westObjects are selector-less Services with slices written by hand,
	// every endpoint on loopback: opted in, loopback let in for tests.
	exports := runExports(t, client, EndpointPolicy{Selectorless: []string{"*"}}.AllowLoopback())
	p := newPair(t, append([]func(*Ingress, *Egress){func(in *Ingress, _ *Egress) { in.Resolver = exports }}, configure...)...)
	return p, target
}

// allowedOnce makes one allowed connection, straight to the ingress, and
// waits for the target's greeting: after it, the target has accepted every
// connection it was ever going to be given before.
func (p *pair) allowedOnce(t *testing.T, authority string) {
	t.Helper()
	c, _, line := p.tunnel(t, p.ingressAddr, authority)
	c.Close()
	require.Equal(t, "west here\n", line)
}

// Each refused request is answered with its status and reason, counted by
// reason and peer cluster, and the target sees no connection.
func TestIngressRefusals(t *testing.T) {
	p, target := exportsPair(t, func(in *Ingress, _ *Egress) { in.MaxHeaderBytes = 4096 })
	echoAddr := target.addr.String()
	for _, tc := range []struct {
		name, request string
		status        int
		reason        Reason
	}{
		{"not exported", connectRequest("secret.default:80"), 403, ReasonNotExported},
		{"no such Service", connectRequest("web.other:80"), 403, ReasonNotExported},
		{"flat-mode export", connectRequest("flat.default:80"), 403, ReasonNotExported},
		{"a mirror", connectRequest("web-paris.default:80"), 403, ReasonNotExported},
		{"port not exported", connectRequest("web.default:8080"), 403, ReasonPortNotExposed},
		{"pod of a non-headless Service", connectRequest("web-0.web.default:80"), 403, ReasonPodNotExported},
		{"pod of an unexported Service", connectRequest("db-0.secret.default:80"), 403, ReasonNotExported},
		{"no such pod", connectRequest("db-7.db.default:80"), 403, ReasonPodNotExported},
		{"no ready endpoint", connectRequest("empty.default:80"), 503, ReasonNoEndpoint},
		{"IPv4 address literal", connectRequest(echoAddr), 400, ReasonAddressLiteral},
		{"IPv6 address literal", connectRequest("[::1]:80"), 400, ReasonAddressLiteral},
		{"malformed authority", connectRequest("web:80"), 400, ReasonBadRequest},
		{"not a CONNECT", "GET / HTTP/1.1\r\nHost: web.default:80\r\n\r\n", 400, ReasonBadRequest},
		{"oversized header", "CONNECT web.default:80 HTTP/1.1\r\nHost: web.default:80\r\nX-Pad: " + strings.Repeat("a", 8192) + "\r\n\r\n", 431, ReasonHeaderTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := target.count()
			p.requireRefusal(t, p.ingressAddr, nil, tc.request, "east", tc.status, tc.reason)
			p.allowedOnce(t, "web.default:80")
			assert.Equal(t, seen+1, target.count(), "the target saw a connection for the refused request")
		})
	}

	t.Run("dial failed", func(t *testing.T) {
		dialErrs := value(dialErrorsTotal.WithLabelValues("east", DirectionIngress))
		p.requireRefusal(t, p.ingressAddr, nil, connectRequest("down.default:80"), "east",
			http.StatusBadGateway, ReasonDialFailed)
		assert.Equal(t, dialErrs+1, value(dialErrorsTotal.WithLabelValues("east", DirectionIngress)))
	})

	t.Run("allowed", func(t *testing.T) {
		for _, auth := range []string{"web.default:80", "db-0.db.default:80"} {
			seen := target.count()
			p.allowedOnce(t, auth)
			assert.Equal(t, seen+1, target.count(), auth)
		}
	})
}

// A failed TLS handshake (a client that does not speak TLS, or presents a
// certificate the ingress must not accept) is counted, the connection
// closed, and the target sees no connection.
func TestIngressRejectsHandshakes(t *testing.T) {
	p, target := exportsPair(t)
	other, err := gatewaytest.NewCA("another root")
	require.NoError(t, err)
	fromOther := issue(t, other, "east", gatewaytest.Options{})
	expired := issue(t, p.ca, "east", gatewaytest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	noIdentity := issue(t, p.ca, "east", gatewaytest.Options{NoIdentity: true})
	otherDomain := issue(t, p.ca, "east", gatewaytest.Options{TrustDomain: "example.org"})

	for _, tc := range []struct {
		name string
		cfg  *tls.Config // nil: plaintext
		// alert is the TLS alert the client reads, when the ingress
		// sends one.
		alert string
	}{
		{name: "plaintext client"},
		{name: "no client certificate", cfg: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, alert: "certificate required"},
		{name: "certificate of another root", cfg: clientTLS(t, fromOther), alert: "bad certificate"},
		{name: "expired certificate", cfg: clientTLS(t, expired), alert: "bad certificate"},
		{name: "certificate without identity", cfg: clientTLS(t, noIdentity), alert: "bad certificate"},
		{name: "identity in another trust domain", cfg: clientTLS(t, otherDomain), alert: "bad certificate"},
		{name: "TLS 1.2", cfg: func() *tls.Config {
			c := clientTLS(t, noIdentity)
			c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			return c
		}(), alert: "protocol version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := value(handshakeFailures.WithLabelValues(DirectionIngress))
			seen := target.count()
			raw, err := net.Dial("tcp", p.ingressAddr)
			require.NoError(t, err)
			defer raw.Close()
			var c net.Conn = raw
			if tc.cfg != nil {
				c = tls.Client(raw, tc.cfg)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			// The client's side of a TLS 1.3 handshake ends before the
			// server has checked its certificate: the refusal shows on
			// the first read.
			_, _ = io.WriteString(c, connectRequest("web.default:80"))
			b, err := io.ReadAll(c)
			assert.Empty(t, string(b), "the ingress answered")
			if err != nil {
				require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the ingress neither answered nor closed")
			}
			if tc.alert != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.alert)
			}
			requireValue(t, handshakeFailures.WithLabelValues(DirectionIngress), before+1)
			p.allowedOnce(t, "web.default:80")
			assert.Equal(t, seen+1, target.count(), "the target saw a connection for the refused client")
		})
	}
}

// shortHandshakeTimeout is the HandshakeTimeout of the tests of clients
// that never finish: short, so that they end soon, yet long enough for the
// honest clients of the same tests (a TLS 1.3 handshake and a CONNECT
// request, under -race, on a machine at load 4: tens of milliseconds) to be
// done well within it. The tests check what becomes of a client that never
// finishes, not how fast an honest one is.
const shortHandshakeTimeout = 2 * time.Second

// A client that connects and never finishes is dropped once
// HandshakeTimeout has passed: one that never starts TLS with a handshake
// failure, one that never finishes its CONNECT request (slow loris) with
// 408.
func TestIngressDropsSlowClients(t *testing.T) {
	p, target := exportsPair(t, func(in *Ingress, _ *Egress) { in.HandshakeTimeout = shortHandshakeTimeout })

	t.Run("no TLS handshake", func(t *testing.T) {
		before := value(handshakeFailures.WithLabelValues(DirectionIngress))
		raw, err := net.Dial("tcp", p.ingressAddr)
		require.NoError(t, err)
		defer raw.Close()
		_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := raw.Read(make([]byte, 1))
		assert.Zero(t, n)
		require.ErrorIs(t, err, io.EOF, "the ingress did not drop a silent client")
		requireValue(t, handshakeFailures.WithLabelValues(DirectionIngress), before+1)
	})

	// Trickled a byte at a time, the request stops in its first line or
	// in a header line: 408 either way.
	for _, prefix := range []string{"", "CONNECT web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n"} {
		t.Run("CONNECT never finished after "+strconv.Quote(prefix), func(t *testing.T) {
			before := refusals("east", DirectionIngress, ReasonHeaderTimeout)
			seen := target.count()
			c := dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil))
			answered := make(chan *http.Response, 1)
			go func() {
				resp, _ := http.ReadResponse(bufio.NewReader(c), nil)
				answered <- resp
			}()
			_, err := io.WriteString(c, prefix)
			require.NoError(t, err)
			req := "X-Slow: " + strings.Repeat("z", 1000)
			if prefix == "" {
				req = "CONNECT web.default:80 HTTP/1.1\r\n" + req
			}
			var resp *http.Response
		trickle:
			for i := 0; ; i++ {
				select {
				case resp = <-answered:
					break trickle
				case <-time.After(20 * time.Millisecond):
				}
				if i < len(req) {
					if _, err := c.Write([]byte{req[i]}); err != nil {
						resp = <-answered
						break
					}
				}
				require.Less(t, i, 5*int(shortHandshakeTimeout/(20*time.Millisecond)), "the ingress kept reading a request for five times HandshakeTimeout")
			}
			require.NotNil(t, resp, "the ingress dropped the slow client without an answer")
			assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
			assert.Equal(t, string(ReasonHeaderTimeout), resp.Header.Get("X-Mcmirror-Reason"))
			assert.Equal(t, before+1, refusals("east", DirectionIngress, ReasonHeaderTimeout))
			p.allowedOnce(t, "web.default:80")
			assert.Equal(t, seen+1, target.count())
		})
	}
}

// Bytes a client sends right behind its CONNECT request, before the
// answer, reach the target first.
func TestIngressForwardsPipelinedBytes(t *testing.T) {
	p, _ := exportsPair(t)
	c := dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil))
	resp, br := connect(t, c, connectRequest("web.default:80")+"pipelined\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{"west here\n", "pipelined\n"} {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
}

// With MaxConns connections open, one more is reset at once and counted;
// once one ends, a new one is served.
func TestIngressMaxConns(t *testing.T) {
	p, target := exportsPair(t, func(in *Ingress, _ *Egress) { in.MaxConns = 2 })
	var open []*tls.Conn
	for range 2 {
		c, _ := p.openStream(t)
		open = append(open, c)
	}
	requireDialResetCounted(t, p.ingressAddr, "", DirectionIngress, ReasonTooMany)
	assert.Equal(t, 2, target.count())

	// One stream ends; its place is free again.
	require.NoError(t, open[0].Close())
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", p.ingressAddr)
		if err != nil {
			return false
		}
		defer c.Close()
		tc := tls.Client(c, p.east.ClientConfig("west", nil))
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(tc, connectRequest("web.default:80")); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), &http.Request{Method: http.MethodConnect})
		return err == nil && resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, 3, target.count(), "a reset client reached the target")
}

// A dial that outlasts what is left of HandshakeTimeout (which bounds the
// handshake and the request, not the dial) still ends in a tunnel.
func TestIngressSlowDial(t *testing.T) {
	echo := startEcho(t, "slow\n")
	p := newPair(t, func(in *Ingress, _ *Egress) {
		in.HandshakeTimeout = shortHandshakeTimeout
		in.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			// The deadline runs from the accept, which came before this
			// dial: a whole HandshakeTimeout from here is past it,
			// however slow the machine.
			select {
			case <-time.After(shortHandshakeTimeout + 100*time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	p.resolver.set(web, echo.addr)
	_, _, line := p.tunnel(t, p.ingressAddr, "web.default:80")
	assert.Equal(t, "slow\n", line)
}

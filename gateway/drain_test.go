package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
)

// requireCutByReset reads c to its end, which must be a reset: a stream
// cut short must never end as a complete one would, with an EOF.
func requireCutByReset(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	require.False(t, err == nil, "the cut stream ended with a clean EOF, as a complete one would")
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the stream was not cut within %v", within)
	require.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
}

// Abort, at the end of a shutdown's grace, resets the streams left at
// both ends, whichever side aborts: the client of the egress sees a reset,
// and so does the target.
func TestAbortResetsStreams(t *testing.T) {
	for _, side := range []string{"ingress", "egress"} {
		t.Run(side, func(t *testing.T) {
			p := newPair(t)
			targetErr := make(chan error, 1)
			target := startServer(t, func(c net.Conn) {
				_, _ = io.WriteString(c, "hi\n")
				_, err := io.Copy(c, c)
				targetErr <- err
			})
			port := p.serveWeb(t, target.addr)
			c := dialEgress(t, port)
			readGreeting(t, c, "hi\n")
			_, err := io.WriteString(c, "ping\n")
			require.NoError(t, err)
			readGreeting(t, c, "ping\n")

			var n int
			if side == "ingress" {
				n = p.ingress.Abort()
			} else {
				n = p.egress.Abort()
			}
			assert.Equal(t, 1, n, "connections reset")
			requireCutByReset(t, c, 10*time.Second)
			err = within(t, targetErr, 10*time.Second, "the target's connection outlived the abort")
			assert.True(t, errors.Is(err, syscall.ECONNRESET), "the target: want a reset, got %v", err)
			require.Eventually(t, func() bool { return p.ingress.Active() == 0 && p.egress.Active() == 0 },
				10*time.Second, 10*time.Millisecond, "places still held after the abort")
		})
	}
}

// A connection accepted after Abort (the listener not closed yet) is reset
// at once, never left open past the end of the process's grace.
func TestAbortResetsLaterConnections(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "hi\n")
	port := p.serveWeb(t, echo.addr)
	assert.Zero(t, p.egress.Abort())
	requireDialReset(t, egressAddr(port))
	assert.Zero(t, echo.count())
}

// The egress tries a peer's ingress once more when it refuses the
// connection (a pod whose listener has closed, still behind the load
// balancer) or resets it (one left in its backlog): the client is served,
// and nothing is counted as a failure but the retry.
func TestEgressRetriesPeerOnce(t *testing.T) {
	closedPort := egressAddr(freePort(t)) // nothing listens there: refused
	for _, tc := range []struct {
		name string
		// peer returns the address the egress is given for west, from
		// the real ingress's.
		peer func(t *testing.T, ingress string) string
		// dial returns the address each dial goes to, by its number.
		dial func(n int32, addr string) string
	}{
		{name: "refused", peer: func(_ *testing.T, ingress string) string { return ingress },
			dial: func(n int32, addr string) string {
				if n == 1 {
					return closedPort
				}
				return addr
			}},
		{name: "reset", peer: resetFirstProxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			peers := &switchPeers{addrs: map[string]string{}}
			p := newPair(t, func(_ *Ingress, eg *Egress) {
				eg.Peers = peers
				countDials(eg, &dials, tc.dial)
			})
			peers.set("west", tc.peer(t, p.ingressAddr))
			echo := startEcho(t, "hi\n")
			port := p.serveWeb(t, echo.addr)

			retries := value(dialRetries.WithLabelValues("west"))
			dialErrs := value(dialErrorsTotal.WithLabelValues("west", DirectionEgress))
			handshakes := value(handshakeFailures.WithLabelValues(DirectionEgress))
			roundTrip(t, port, "hi\n")
			assert.Equal(t, int32(2), dials.Load())
			assert.Equal(t, retries+1, value(dialRetries.WithLabelValues("west")))
			assert.Equal(t, dialErrs, value(dialErrorsTotal.WithLabelValues("west", DirectionEgress)))
			assert.Equal(t, handshakes, value(handshakeFailures.WithLabelValues(DirectionEgress)))
			assert.Equal(t, 1, echo.count())
		})
	}

	// Once only: a peer that refuses every connection costs two dials,
	// and the client is reset.
	t.Run("refused twice", func(t *testing.T) {
		var dials atomic.Int32
		p := newPair(t, func(_ *Ingress, eg *Egress) {
			countDials(eg, &dials, func(int32, string) string { return closedPort })
		})
		port := p.mirror(t, "web", "", 80)
		dialErrs := value(dialErrorsTotal.WithLabelValues("west", DirectionEgress))
		requireDialReset(t, egressAddr(port))
		assert.Equal(t, int32(2), dials.Load())
		assert.Equal(t, dialErrs+1, value(dialErrorsTotal.WithLabelValues("west", DirectionEgress)))
	})
}

// countDials has eg count its dials in n, and send the nth to to(n, addr)
// when to is set.
func countDials(eg *Egress, n *atomic.Int32, to func(n int32, addr string) string) {
	eg.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if i := n.Add(1); to != nil {
			addr = to(i, addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// resetFirstProxy listens on loopback and resets the first connection it
// accepts at once; it carries the others to addr.
func resetFirstProxy(t *testing.T, addr string) string {
	t.Helper()
	var reset atomic.Bool
	return startServer(t, func(c net.Conn) {
		if !reset.Swap(true) {
			abort(c)
			return
		}
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() {
			_, _ = io.Copy(up, c)
			_ = up.(*net.TCPConn).CloseWrite()
		}()
		_, _ = io.Copy(c, up)
	}).addr.String()
}

// A refusal of the destination is an answer: it is not tried again.
func TestEgressDoesNotRetryRefusal(t *testing.T) {
	var dials atomic.Int32
	p := newPair(t, func(_ *Ingress, eg *Egress) { countDials(eg, &dials, nil) })
	port := p.mirror(t, "web", "", 80) // web is not exported
	requireDialReset(t, egressAddr(port))
	assert.Equal(t, int32(1), dials.Load())
}

// Until its informers have synced, the ingress cannot tell an exported
// Service from one that is not: it answers 503 not_synced, which a client
// may try again, rather than 403 not_exported, which it should not.
func TestIngressNotSynced(t *testing.T) {
	p := newPair(t)
	exports := newExports(t, remotetest.NewClientset()) // never run: never synced
	addr := serveIngress(t, &Ingress{Certs: p.west, Resolver: exports})
	p.requireRefusal(t, addr, nil, connectRequest("web.default:80"), "east",
		http.StatusServiceUnavailable, ReasonNotSynced)
}

// The egress waits for the answer to its CONNECT longer than the peer's
// ingress waits for its dial of the target (both --dial-timeout): a target
// that cannot be reached is then told by the peer (502 dial_failed), not
// taken for a peer that does not answer.
func TestEgressOutwaitsIngressDial(t *testing.T) {
	const dialTimeout = time.Second
	p := newPair(t, func(in *Ingress, eg *Egress) {
		in.DialTimeout = dialTimeout
		in.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done() // a target that never answers
			return nil, ctx.Err()
		}
		eg.DialTimeout = dialTimeout
	})
	echo := startEcho(t, "hi\n")
	port := p.serveWeb(t, echo.addr)

	refused := refusals("west", DirectionEgress, ReasonPeerRefused)
	failed := refusals("west", DirectionEgress, ReasonDialFailed)
	ingressFailed := refusals("east", DirectionIngress, ReasonDialFailed)
	c := dialEgress(t, port)
	requireReset(t, c)
	requireValue(t, refusalsTotal.WithLabelValues("east", DirectionIngress, string(ReasonDialFailed)), ingressFailed+1)
	assert.Equal(t, refused+1, refusals("west", DirectionEgress, ReasonPeerRefused), "the egress did not hear the ingress's dial_failed")
	assert.Equal(t, failed, refusals("west", DirectionEgress, ReasonDialFailed), "the egress gave up on a peer that was dialling")
}

package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// ProbePath is the path of the probe request: GET over the same mTLS port
// as the tunnels, answered 200 by an ingress whose informers have synced.
const ProbePath = "/mcmirror/probe"

// Resolver says where a destination may be dialled, or why not: Exports,
// or a fake in tests.
type Resolver interface {
	Resolve(Destination) (netip.AddrPort, Reason)
	HasSynced() bool
}

// Ingress is the target cluster's side: one TLS 1.3 listener that takes
// HTTP/1.1 CONNECT requests from the egress of linked clusters (mutual TLS,
// shared trust root) and carries each to an exported destination of its own
// cluster.
type Ingress struct {
	Certs    *Certs
	Resolver Resolver

	// DialTimeout bounds a dial to the target (default 5 s).
	DialTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake and the CONNECT request
	// together (default 10 s): a client that never finishes is dropped.
	HandshakeTimeout time.Duration
	// IdleTimeout ends an established stream with no traffic either way
	// for that long (default 1 h; 0 keeps the default, negative: none).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the CONNECT request (default 8 KiB).
	MaxHeaderBytes int
	// MaxConns bounds concurrent connections, tunnels and handshakes
	// (default 16384). When they are all taken, a new connection takes
	// the place of the oldest one still in its handshake or request,
	// which is closed (handshake_evicted); when every place is an
	// established stream, the new one is reset (too_many_connections).
	MaxConns int
	// MaxConnsPerPeer bounds the streams of one peer cluster, and the
	// dials made for it (default: none but MaxConns): one more is
	// answered 503 (too_many_from_peer). Its probes are answered still.
	MaxConnsPerPeer int
	// AllowClusters are the clusters whose gateways may connect: a
	// client certificate naming any other is refused
	// (cluster_not_allowed). Nil allows every cluster whose certificate
	// chains to the trust root.
	AllowClusters map[string]bool
	// DialContext dials targets (default: a net.Dialer).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	once  sync.Once
	admit *admission
	tls   *tls.Config
	conns connSet
	// accepting is true while Serve's accept loop runs.
	accepting atomic.Bool
}

// Active returns the number of connections being set up or carried.
func (in *Ingress) Active() int {
	in.init()
	return in.admit.active()
}

func (in *Ingress) init() {
	in.once.Do(func() {
		in.admit = newAdmission(orDefault(in.MaxConns, 16384), in.MaxConnsPerPeer)
		in.tls = in.Certs.ServerConfig()
	})
}

// Serve accepts connections on ln until ctx ends, then closes ln and
// returns; connections already accepted are left to finish (streams bounded
// by the idle timeout) or to Abort. A temporary failure of Accept (out of
// file descriptors) is waited out (acceptLoop); any other closes ln and is
// returned.
func (in *Ingress) Serve(ctx context.Context, ln net.Listener) error {
	in.init()
	logger := klog.FromContext(ctx)
	context.AfterFunc(ctx, func() { ln.Close() })
	// A connection accepted goes on, handshake and dial included, after
	// ctx ends: the listener closes, the connections drain.
	connCtx := context.WithoutCancel(ctx)
	in.accepting.Store(true)
	defer in.accepting.Store(false)
	err := acceptLoop(ctx, logger, DirectionIngress, ln, func(c net.Conn) {
		p, evicted := in.admit.admit(c)
		if p == nil {
			refusalsTotal.WithLabelValues("", DirectionIngress, string(ReasonTooMany)).Inc()
			logger.V(1).Info("Refused", "remote", c.RemoteAddr().String(), "reason", ReasonTooMany)
			abort(c)
			return
		}
		if evicted != nil {
			refusalsTotal.WithLabelValues(evicted.peer, DirectionIngress, string(ReasonEvicted)).Inc()
			logger.V(1).Info("Refused", "remote", evicted.conn.RemoteAddr().String(), "peer", evicted.peer, "reason", ReasonEvicted)
			abort(evicted.conn)
			in.conns.remove(evicted.conn)
		}
		if !in.conns.add(c) {
			in.admit.release(p)
			return
		}
		go func() {
			if !in.handle(connCtx, logger, p) {
				in.done(p)
			}
		}()
	})
	if err != nil {
		ln.Close()
		logger.Error(err, "Ingress stopped accepting connections", "address", ln.Addr().String())
	}
	return err
}

// Accepting reports whether Serve accepts connections: not before it
// starts, nor once its listener is closed or Accept has failed for good.
func (in *Ingress) Accepting() bool { return in.accepting.Load() }

// Abort resets every connection the ingress holds, streams and handshakes,
// and every one it accepts from now on, and returns how many it reset: the
// end of a shutdown's grace. A stream cut so ends with a reset at both of
// its ends, never with the orderly close of a complete one.
func (in *Ingress) Abort() int {
	in.init()
	return in.conns.abortAll()
}

// done gives back the place of a connection that ended.
func (in *Ingress) done(p *pendingConn) {
	in.conns.remove(p.conn)
	in.admit.release(p)
}

// handle runs one connection: handshake, request, then the tunnel or the
// probe answer. It reports whether it handed the connection to a stream,
// which gives the connection's place back when it ends.
func (in *Ingress) handle(ctx context.Context, logger klog.Logger, p *pendingConn) (carried bool) {
	raw := p.conn
	deadline := time.Now().Add(orDefault(in.HandshakeTimeout, 10*time.Second))
	_ = raw.SetDeadline(deadline)
	conn := tls.Server(newRawConn(raw), in.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		if in.admit.wasEvicted(p) {
			return false // counted as evicted
		}
		handshakeFailures.WithLabelValues(DirectionIngress).Inc()
		logger.V(2).Info("TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		return false
	}
	peer, err := in.Certs.PeerCluster(conn.ConnectionState())
	if err != nil {
		// Verified already; a certificate without an identity.
		handshakeFailures.WithLabelValues(DirectionIngress).Inc()
		logger.Info("Client certificate names no cluster", "remote", raw.RemoteAddr().String(), "err", err)
		conn.Close()
		return false
	}
	if in.AllowClusters != nil && !in.AllowClusters[peer] {
		// Before its request is read: nothing of what a cluster that is
		// not linked asks for is looked at.
		in.refuse(logger, conn, peer, "", ReasonClusterNotAllowed, nil)
		return false
	}
	in.admit.identified(p, peer)

	req, br, tooLarge, err := readRequest(conn, orDefault(in.MaxHeaderBytes, 8<<10))
	if err == nil && !in.admit.establish(p) {
		// Evicted as the request arrived: the place is another's.
		abort(conn)
		return false
	}
	if err != nil {
		if in.admit.wasEvicted(p) {
			return false // closed, and counted, by the eviction
		}
		reason := ReasonBadRequest
		var ne net.Error
		switch {
		case tooLarge:
			reason = ReasonHeaderTooLarge
		case errors.As(err, &ne) && ne.Timeout(), !time.Now().Before(deadline):
			// A request cut by the deadline may also read as a
			// malformed one: bufio hands over a partial line first.
			reason = ReasonHeaderTimeout
		}
		in.refuse(logger, conn, peer, "", reason, err)
		return false
	}
	// HandshakeTimeout bounds the handshake and the request; the dial has
	// DialTimeout, and the answer must not find the deadline passed.
	_ = raw.SetDeadline(time.Time{})
	asked, reason, err := parseRequest(req)
	if reason != "" {
		in.refuse(logger, conn, peer, req.Host, reason, err)
		return false
	}
	if asked.probe {
		in.probe(conn)
		return false
	}
	if !in.admit.claim(p) {
		in.refuse(logger, conn, peer, req.Host, ReasonTooManyFromPeer, nil)
		return false
	}
	dest := asked.dest
	if !in.Resolver.HasSynced() {
		// Until the informers have synced, nothing can be told apart:
		// an exported Service would read as not_exported.
		in.refuse(logger, conn, peer, req.Host, ReasonNotSynced, nil)
		return false
	}
	target, reason := in.Resolver.Resolve(dest)
	if reason != "" {
		in.refuse(logger, conn, peer, req.Host, reason, nil)
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, orDefault(in.DialTimeout, 5*time.Second))
	tc, err := dialTCP(dctx, in.DialContext, target.String())
	cancel()
	if err != nil {
		dialErrorsTotal.WithLabelValues(peer, DirectionIngress).Inc()
		in.refuse(logger, conn, peer, req.Host, ReasonDialFailed, err)
		return false
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\n\r\n"); err != nil {
		tc.Close()
		conn.Close()
		return false
	}
	// Bytes the client sent after the request, before our answer.
	if n := br.Buffered(); n > 0 {
		early, _ := br.Peek(n)
		if _, err := tc.Write(early); err != nil {
			tc.Close()
			abort(conn)
			return false
		}
		bytesTotal.WithLabelValues(peer, DirectionIngress, "sent").Add(float64(n))
	}
	logger.V(3).Info("Tunnel", "peer", peer, "destination", req.Host, "target", target.String())
	release := in.guardStream(peer, dest, target, conn, tc)
	carry(peer, DirectionIngress, conn, tc, idleOrDefault(in.IdleTimeout), func() { release(); in.done(p) })
	return true
}

// refuse answers a refused request with its status and counts it.
func (in *Ingress) refuse(logger klog.Logger, conn *tls.Conn, peer, dest string, reason Reason, err error) {
	refusalsTotal.WithLabelValues(peer, DirectionIngress, string(reason)).Inc()
	logger.V(1).Info("Refused", "peer", peer, "destination", dest, "reason", reason, "err", err)
	st := reason.status()
	// The answer gets a deadline of its own: the handshake deadline has
	// passed already when the refusal is of a request that timed out.
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nX-Mcmirror-Reason: %s\r\nConnection: close\r\n\r\n",
		st, http.StatusText(st), reason)
	// Close as net/http does: end our side, then read off what the client
	// still sends for a moment. Closing with unread data would reset the
	// connection, and a reset can destroy the answer before it is read.
	_ = conn.CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 256<<10))
	conn.Close()
}

// probe answers a probe: 200 once the informers have synced, 503 before.
func (in *Ingress) probe(conn *tls.Conn) {
	st := http.StatusOK
	if !in.Resolver.HasSynced() {
		st = http.StatusServiceUnavailable
	}
	_, _ = fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\nX-Mcmirror-Cluster: %s\r\n\r\n",
		st, http.StatusText(st), in.Certs.Cluster())
	conn.Close()
}

// carry starts proxying an established stream, keeps the metrics of it,
// and calls done when it ends.
func carry(peer, direction string, client, target net.Conn, idle time.Duration, done func()) {
	connsTotal.WithLabelValues(peer, direction).Inc()
	open := connsOpen.WithLabelValues(peer, direction)
	open.Inc()
	sent := bytesTotal.WithLabelValues(peer, direction, "sent")
	received := bytesTotal.WithLabelValues(peer, direction, "received")
	s := &stream{idle: idle,
		sent:     func(n int64) { sent.Add(float64(n)) },
		received: func(n int64) { received.Add(float64(n)) },
	}
	s.start(client, target, func() {
		open.Dec()
		done()
	})
}

// orDefault is v, or def when v is not positive.
func orDefault[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// dialTCP dials addr with dial, or with a net.Dialer when dial is nil.
func dialTCP(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return dial(ctx, "tcp", addr)
}

func idleOrDefault(d time.Duration) time.Duration {
	if d == 0 {
		return time.Hour
	}
	return max(d, 0)
}

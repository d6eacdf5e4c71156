package gateway

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Peers tells where the ingress of a linked cluster is: host:port.
type Peers interface {
	IngressAddress(cluster string) (string, bool)
}

// StaticPeers is a fixed set of peers: cluster name to ingress address.
type StaticPeers map[string]string

// IngressAddress returns the address given for cluster.
func (p StaticPeers) IngressAddress(cluster string) (string, bool) {
	a, ok := p[cluster]
	return a, ok
}

// Egress is the source cluster's side: it listens on every egress port the
// controller recorded on the local mirror Services, learned from a watch
// (ports come and go with no restart), and carries each connection to the
// ingress of the mirror's cluster, naming the remote destination in a
// CONNECT request. When the peer cannot be reached or refuses, the client's
// connection is reset at once: a fast failure, never a hang.
type Egress struct {
	Certs *Certs
	Peers Peers
	// BindAddress is the address egress ports are bound on (default: all).
	BindAddress string

	// DialTimeout bounds the dial and TLS handshake of the peer's ingress
	// together (default 5 s).
	DialTimeout time.Duration
	// AnswerTimeout bounds the wait for the answer to the CONNECT request
	// (default DialTimeout + 2 s). It must exceed the peer ingress's own
	// DialTimeout, which its answer may wait for: then a target the peer
	// cannot reach is told by the peer (dial_failed, 502), rather than
	// taken for a peer that does not answer.
	AnswerTimeout time.Duration
	// IdleTimeout: see Ingress.IdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds concurrent connections (default 16384).
	MaxConns int
	// MaxConnsPerSource bounds the concurrent connections of one client
	// address (default 1024; negative: none): one more is reset
	// (too_many_from_source).
	MaxConnsPerSource int
	// Trust is which claims on egress ports are believed (routes.go).
	Trust RouteTrust
	// ListenFunc and DialContext replace net.Listen and a net.Dialer in
	// tests.
	ListenFunc  func(network, addr string) (net.Listener, error)
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	once      sync.Once
	limit     limiter
	perSource sourceLimit[netip.Addr]
	routes    atomic.Pointer[map[int32]Route]
	mu        sync.Mutex
	ln        map[int32]net.Listener
	failed    map[int32]string // ports that could not be listened on, and why
	conflict  map[int32]string // ports recorded twice, as logged
	synced    atomic.Bool
	kick      chan struct{}
	// dead are the ports whose accept loop ended on an error, until they
	// are listened on again; Ready is false while there are any.
	dead  map[int32]string
	deadN atomic.Int32
	conns connSet
}

// MirrorSelector selects the mirror Services the egress reads: the
// controller's own.
var MirrorSelector = labels.ManagedBy + "=" + labels.ManagedByValue + "," + labels.MirroredService + "=" + labels.MirroredServiceValue

// Run watches the mirror Services through client and serves their egress
// ports until ctx ends.
func (e *Egress) Run(ctx context.Context, client kubernetes.Interface) error {
	logger := klog.FromContext(ctx).WithName("egress")
	e.init()
	e.ln = map[int32]net.Listener{}
	e.failed = map[int32]string{}
	e.conflict = map[int32]string{}
	e.dead = map[int32]string{}
	e.kick = make(chan struct{}, 1)
	e.routes.Store(&map[int32]Route{})

	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = MirrorSelector }))
	inf := f.Core().V1().Services().Informer()
	kick := func(any) { e.wake() }
	_, _ = inf.AddEventHandler(remote.OnAny(kick))
	lister := f.Core().V1().Services().Lister()
	claimsSynced := e.Trust.watch(f, logger, kick)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, claimsSynced) {
		return fmt.Errorf("mirror Services: informer did not sync: %w", ctx.Err())
	}
	// A port that could not be listened on (taken by another process) is
	// tried again now and then.
	retry := time.NewTicker(10 * time.Second)
	defer retry.Stop()
	defer e.closeAll()
	for {
		svcs, _ := lister.List(k8slabels.Everything())
		e.apply(ctx, logger, svcs)
		e.synced.Store(true)
		select {
		case <-ctx.Done():
			return nil
		case <-e.kick:
		case <-retry.C:
		}
	}
}

// Active returns the number of client connections being set up or
// carried.
func (e *Egress) Active() int {
	e.init()
	return len(e.limit)
}

func (e *Egress) init() {
	e.once.Do(func() {
		e.limit = newLimiter(orDefault(e.MaxConns, 16384))
		e.perSource.max = cmp.Or(e.MaxConnsPerSource, 1024)
	})
}

// Ready reports whether the egress has read the mirrors once and listens
// on every port it could, and no port's accept loop has ended (until the
// port is listened on again).
func (e *Egress) Ready() bool { return e.synced.Load() && e.deadN.Load() == 0 }

// Abort resets every client connection the egress holds, streams and
// those still being set up, and every one it accepts from now on, and
// returns how many it reset: the end of a shutdown's grace. The stream's
// connection to the peer's ingress is reset with it.
func (e *Egress) Abort() int {
	return e.conns.abortAll()
}

// done gives back the place of a client connection that ended.
func (e *Egress) done(c net.Conn) {
	e.conns.remove(c)
	e.perSource.release(sourceIP(c))
	e.limit.release()
}

// apply makes the listeners and the route table what the mirrors say.
func (e *Egress) apply(ctx context.Context, logger klog.Logger, svcs []*corev1.Service) {
	routes, conflicts := e.Trust.Routes(svcs)
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, owners := range conflicts {
		msg := fmt.Sprint(owners)
		if e.conflict[p] != msg {
			logger.Error(nil, "Egress port claimed by more than one mirror Service; serving the first", "port", p, "mirrors", owners)
			e.conflict[p] = msg
		}
	}
	for p := range e.conflict {
		if _, still := conflicts[p]; !still {
			logger.Info("Egress port conflict resolved", "port", p)
			delete(e.conflict, p)
		}
	}
	egressConflicts.Set(float64(len(conflicts)))
	// Routes first: a listener opened below finds its route at once.
	e.routes.Store(&routes)
	for p, ln := range e.ln {
		if _, want := routes[p]; !want {
			ln.Close()
			delete(e.ln, p)
			logger.V(1).Info("Stopped listening", "port", p)
		}
	}
	for p, r := range routes {
		if _, ok := e.ln[p]; ok {
			continue
		}
		ln, err := e.listen(net.JoinHostPort(e.BindAddress, strconv.Itoa(int(p))))
		if err != nil {
			if e.failed[p] != err.Error() {
				logger.Error(err, "Cannot listen on an egress port", "port", p, "mirror", r.Mirror)
				e.failed[p] = err.Error()
			}
			continue
		}
		delete(e.failed, p)
		delete(e.dead, p)
		e.ln[p] = ln
		logger.V(1).Info("Listening", "port", p, "cluster", r.Cluster, "destination", r.Dest.String())
		go e.serve(ctx, logger, p, ln)
	}
	for _, m := range []map[int32]string{e.failed, e.dead} {
		maps.DeleteFunc(m, func(p int32, _ string) bool { _, want := routes[p]; return !want })
	}
	e.deadN.Store(int32(len(e.dead)))
	egressListeners.Set(float64(len(e.ln)))
}

func (e *Egress) listen(addr string) (net.Listener, error) {
	if e.ListenFunc != nil {
		return e.ListenFunc("tcp", addr)
	}
	return net.Listen("tcp", addr)
}

func (e *Egress) closeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, ln := range e.ln {
		ln.Close()
		delete(e.ln, p)
	}
	egressListeners.Set(0)
}

// serve accepts on one egress port until its listener is closed. A
// temporary failure of Accept (out of file descriptors) is waited out
// (acceptLoop). Any other ends the loop: the port is closed, so that
// clients are refused rather than left in its backlog, Ready is false, and
// the port is listened on again a second later.
func (e *Egress) serve(ctx context.Context, logger klog.Logger, port int32, ln net.Listener) {
	// A connection accepted goes on after ctx ends: the listeners close,
	// the connections drain.
	connCtx := context.WithoutCancel(ctx)
	err := acceptLoop(ctx, logger.WithValues("port", port), DirectionEgress, ln, func(c net.Conn) {
		if !e.limit.acquire() {
			refusalsTotal.WithLabelValues("", DirectionEgress, string(ReasonTooMany)).Inc()
			abort(c)
			return
		}
		if !e.perSource.acquire(sourceIP(c)) {
			e.limit.release()
			e.reset(logger, c, "", port, ReasonTooManyFromSource, nil)
			return
		}
		if !e.conns.add(c) {
			e.perSource.release(sourceIP(c))
			e.limit.release()
			return
		}
		go func() {
			if !e.handle(connCtx, logger, port, c) {
				e.done(c)
			}
		}()
	})
	if err == nil {
		return // closed
	}
	ln.Close()
	e.mu.Lock()
	if e.ln[port] == ln {
		delete(e.ln, port)
		e.dead[port] = err.Error()
		e.deadN.Store(int32(len(e.dead)))
		egressListeners.Set(float64(len(e.ln)))
	}
	e.mu.Unlock()
	logger.Error(err, "Egress port stopped accepting connections; listening on it again in a second", "port", port)
	time.AfterFunc(time.Second, e.wake)
}

// wake has Run apply the mirrors again.
func (e *Egress) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// handle carries one client connection to its route's peer. It reports
// whether it handed the connection to a stream, which gives the
// connection's place back when it ends.
func (e *Egress) handle(ctx context.Context, logger klog.Logger, port int32, client net.Conn) (carried bool) {
	r, ok := (*e.routes.Load())[port]
	if !ok {
		e.reset(logger, client, "", port, ReasonNoRoute, nil)
		return false
	}
	addr, ok := e.Peers.IngressAddress(r.Cluster)
	if !ok {
		e.reset(logger, client, r.Cluster, port, ReasonUnknownPeer, nil)
		return false
	}
	peer, early, reason, err := e.connect(ctx, logger, r, addr)
	if reason != "" {
		e.reset(logger, client, r.Cluster, port, reason, err)
		return false
	}
	if len(early) > 0 {
		if _, err := client.Write(early); err != nil {
			abort(peer)
			client.Close()
			return false
		}
		bytesTotal.WithLabelValues(r.Cluster, DirectionEgress, "received").Add(float64(len(early)))
	}
	carry(r.Cluster, DirectionEgress, client, peer, idleOrDefault(e.IdleTimeout), func() { e.done(client) })
	return true
}

// connect opens a tunnel to r through the ingress at addr: TCP, TLS with
// the peer's identity checked, CONNECT, 200. It returns the tunnel and any
// bytes of the target that arrived with the answer.
//
// A connection that the peer refuses, resets or closes before it answers
// is tried once more: what an ingress that is shutting down does (its pod
// still behind the load balancer, a connection left in its backlog), and
// another pod of it likely takes the second. Nothing of the client's has
// been sent yet. A refusal of the destination (an answer) and a timeout
// are not tried again.
func (e *Egress) connect(ctx context.Context, logger klog.Logger, r Route, addr string) (*tls.Conn, []byte, Reason, error) {
	conn, early, f := e.tryConnect(ctx, r, addr)
	if f != nil && retryable(f.err) {
		dialRetries.WithLabelValues(r.Cluster).Inc()
		logger.V(1).Info("Peer's ingress did not take the connection; trying once more", "peer", r.Cluster, "address", addr, "err", f.err)
		conn, early, f = e.tryConnect(ctx, r, addr)
	}
	if f != nil {
		switch {
		case f.dial:
			dialErrorsTotal.WithLabelValues(r.Cluster, DirectionEgress).Inc()
		case f.reason == ReasonHandshake:
			handshakeFailures.WithLabelValues(DirectionEgress).Inc()
		}
		return nil, nil, f.reason, f.err
	}
	return conn, early, "", nil
}

// connectFailure is why one try of connect failed.
type connectFailure struct {
	reason Reason
	err    error
	dial   bool // the TCP connection itself failed
}

// retryable tells whether a try that failed so may be made once more: the
// peer refused the connection, reset it, or closed it before it answered.
func retryable(err error) bool {
	return slices.ContainsFunc([]error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF},
		func(e error) bool { return errors.Is(err, e) })
}

// tryConnect is one try of connect: the dial and handshake within
// DialTimeout, the answer within AnswerTimeout.
func (e *Egress) tryConnect(ctx context.Context, r Route, addr string) (*tls.Conn, []byte, *connectFailure) {
	dialTimeout := orDefault(e.DialTimeout, 5*time.Second)
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	raw, err := dialTCP(ctx, e.DialContext, addr)
	if err != nil {
		return nil, nil, &connectFailure{reason: ReasonDialFailed, err: err, dial: true}
	}
	deadline, _ := ctx.Deadline()
	_ = raw.SetDeadline(deadline)
	conn := tls.Client(newRawConn(raw), e.Certs.PeerConfig(r.Cluster))
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, nil, &connectFailure{reason: ReasonHandshake, err: err}
	}
	// The answer may wait for the peer's dial of the target, which its
	// own DialTimeout bounds: this wait is longer.
	_ = raw.SetDeadline(time.Now().Add(orDefault(e.AnswerTimeout, dialTimeout+2*time.Second)))
	auth := r.Dest.String()
	if _, err := io.WriteString(conn, "CONNECT "+auth+" HTTP/1.1\r\nHost: "+auth+"\r\n\r\n"); err != nil {
		abort(conn)
		return nil, nil, &connectFailure{reason: ReasonDialFailed, err: err}
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		abort(conn)
		return nil, nil, &connectFailure{reason: ReasonDialFailed, err: err}
	}
	if resp.StatusCode != http.StatusOK {
		abort(conn)
		return nil, nil, &connectFailure{reason: ReasonPeerRefused, err: fmt.Errorf("%s: %s", resp.Status, resp.Header.Get("X-Mcmirror-Reason"))}
	}
	_ = raw.SetDeadline(time.Time{})
	var early []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		early = append([]byte(nil), b...)
	}
	return conn, early, nil
}

// reset refuses a client connection with a reset, and counts it.
func (e *Egress) reset(logger klog.Logger, client net.Conn, peer string, port int32, reason Reason, err error) {
	refusalsTotal.WithLabelValues(peer, DirectionEgress, string(reason)).Inc()
	logger.V(1).Info("Reset a client connection", "port", port, "remote", client.RemoteAddr().String(), "peer", peer, "reason", reason, "err", err)
	abort(client)
}

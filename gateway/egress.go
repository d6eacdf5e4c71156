package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

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

	// DialTimeout bounds the dial, handshake and CONNECT answer together
	// (default 5 s).
	DialTimeout time.Duration
	// IdleTimeout: see Ingress.IdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds concurrent connections (default 16384).
	MaxConns int
	// ListenFunc and DialContext replace net.Listen and a net.Dialer in
	// tests.
	ListenFunc  func(network, addr string) (net.Listener, error)
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	once     sync.Once
	limit    limiter
	routes   atomic.Pointer[map[int32]Route]
	mu       sync.Mutex
	ln       map[int32]net.Listener
	failed   map[int32]string // ports that could not be listened on, and why
	conflict map[int32]string // ports recorded twice, as logged
	synced   atomic.Bool
	kick     chan struct{}
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
	e.kick = make(chan struct{}, 1)
	empty := map[int32]Route{}
	e.routes.Store(&empty)

	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = MirrorSelector }))
	inf := f.Core().V1().Services().Informer()
	kick := func(any) {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: kick, DeleteFunc: kick,
		UpdateFunc: func(_, o any) { kick(o) }})
	lister := f.Core().V1().Services().Lister()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
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
		n := e.MaxConns
		if n <= 0 {
			n = 16384
		}
		e.limit = newLimiter(n)
	})
}

// Ready reports whether the egress has read the mirrors once and listens
// on every port it could.
func (e *Egress) Ready() bool { return e.synced.Load() }

// apply makes the listeners and the route table what the mirrors say.
func (e *Egress) apply(ctx context.Context, logger klog.Logger, svcs []*corev1.Service) {
	routes, conflicts := Routes(svcs)
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, owners := range conflicts {
		msg := fmt.Sprint(owners)
		if e.conflict[p] != msg {
			logger.Error(nil, "Egress port recorded by more than one mirror Service; not serving it", "port", p, "mirrors", owners)
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
		e.ln[p] = ln
		logger.V(1).Info("Listening", "port", p, "cluster", r.Cluster, "destination", r.Dest.String())
		go e.serve(ctx, logger, p, ln)
	}
	for p := range e.failed {
		if _, want := routes[p]; !want {
			delete(e.failed, p)
		}
	}
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

// serve accepts on one egress port until its listener is closed.
func (e *Egress) serve(ctx context.Context, logger klog.Logger, port int32, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return // closed
		}
		if !e.limit.acquire() {
			refusalsTotal.WithLabelValues("", DirectionEgress, string(ReasonTooMany)).Inc()
			abort(c)
			continue
		}
		go func() {
			if !e.handle(ctx, logger, port, c) {
				e.limit.release()
			}
		}()
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
	peer, early, reason, err := e.connect(ctx, r, addr)
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
	carry(r.Cluster, DirectionEgress, client, peer, idleOrDefault(e.IdleTimeout), e.limit.release)
	return true
}

// connect opens a tunnel to r through the ingress at addr: TCP, TLS with
// the peer's identity checked, CONNECT, 200. It returns the tunnel and any
// bytes of the target that arrived with the answer.
func (e *Egress) connect(ctx context.Context, r Route, addr string) (*tls.Conn, []byte, Reason, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(e.DialTimeout, 5*time.Second))
	defer cancel()
	raw, err := e.dial(ctx, addr)
	if err != nil {
		dialErrorsTotal.WithLabelValues(r.Cluster, DirectionEgress).Inc()
		return nil, nil, ReasonDialFailed, err
	}
	deadline, _ := ctx.Deadline()
	_ = raw.SetDeadline(deadline)
	conn := tls.Client(newRawConn(raw), e.Certs.PeerConfig(r.Cluster))
	if err := conn.HandshakeContext(ctx); err != nil {
		handshakeFailures.WithLabelValues(DirectionEgress).Inc()
		raw.Close()
		return nil, nil, ReasonHandshake, err
	}
	auth := r.Dest.String()
	if _, err := io.WriteString(conn, "CONNECT "+auth+" HTTP/1.1\r\nHost: "+auth+"\r\n\r\n"); err != nil {
		abort(conn)
		return nil, nil, ReasonDialFailed, err
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		abort(conn)
		return nil, nil, ReasonDialFailed, err
	}
	if resp.StatusCode != http.StatusOK {
		abort(conn)
		return nil, nil, ReasonPeerRefused, fmt.Errorf("%s: %s", resp.Status, resp.Header.Get("X-Mcmirror-Reason"))
	}
	_ = raw.SetDeadline(time.Time{})
	var early []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		early = append([]byte(nil), b...)
	}
	return conn, early, "", nil
}

func (e *Egress) dial(ctx context.Context, addr string) (net.Conn, error) {
	if e.DialContext != nil {
		return e.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// reset refuses a client connection with a reset, and counts it.
func (e *Egress) reset(logger klog.Logger, client net.Conn, peer string, port int32, reason Reason, err error) {
	refusalsTotal.WithLabelValues(peer, DirectionEgress, string(reason)).Inc()
	logger.V(1).Info("Reset a client connection", "port", port, "peer", peer, "reason", reason, "err", err)
	abort(client)
}

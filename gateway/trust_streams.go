package gateway

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/remote"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// An established ingress stream was allowed by three things: its Service
// was exported (with that port, and that pod), its target was an endpoint
// of it, and its peer's cluster was allowed. When one of them is withdrawn
// the stream is ended, as Istio's ztunnel ends the connections a policy
// change no longer allows: a withdrawn export must not leave a tunnel open
// into the cluster for as long as its client cares to keep it.
//
// Each informer event on a Service or an EndpointSlice marks its Service;
// the sweeper then checks the streams of the marked Services against the
// informers' stores (which hold the change before the event is delivered)
// and aborts, both ways, those no longer allowed. So a stream ends within
// one sweep of the event's delivery: microseconds of work for the streams
// of one Service. Every streamSweepInterval every stream is checked again,
// whatever the events. A stream is checked also as it is registered, so
// that a change between its resolution and its registration is not missed.

// streamSweepInterval is how often every stream is checked, events or not.
const streamSweepInterval = 10 * time.Second

// Why a stream was ended: the values of the ingress_streams_ended_total
// metric's reason label.
const (
	streamNotExported       = "not_exported"        // the Service, its port or its pod is no longer exported
	streamEndpointGone      = "endpoint_gone"       // the target is no longer an endpoint the policy allows
	streamClusterNotAllowed = "cluster_not_allowed" // the peer's cluster left the allow-list
)

// guardedStream is one established stream.
type guardedStream struct {
	peer    string
	dest    Destination
	target  netip.AddrPort
	allowed func() bool // whether the peer's cluster is still allowed
	conns   []net.Conn
	once    sync.Once
}

// streamGuard holds the established streams, by Service, and ends those
// no longer allowed: allowed returns the targets a destination may still
// reach, or why it is no destination at all.
type streamGuard struct {
	allowed func(Destination) (map[netip.AddrPort]bool, string)

	mu      sync.Mutex
	streams map[string]map[*guardedStream]struct{} // namespace/service
	dirty   map[string]bool
	all     bool
	kick    chan struct{}
	logger  klog.Logger
}

func newStreamGuard(allowed func(Destination) (map[netip.AddrPort]bool, string)) *streamGuard {
	return &streamGuard{allowed: allowed, streams: map[string]map[*guardedStream]struct{}{},
		dirty: map[string]bool{}, kick: make(chan struct{}, 1), logger: klog.Background()}
}

func serviceKey(d Destination) string { return d.Namespace + "/" + d.Service }

// objectKey returns the namespace/name of an informer's object, deleted
// or not.
func objectKey(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Key
	}
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// follow marks the Service of every event of the EndpointSlices informer
// and of each Services informer (one per way of export).
func (g *streamGuard) follow(slices cache.SharedIndexInformer, services ...cache.SharedIndexInformer) {
	sliceKey := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			return es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		}
		return ""
	}
	for _, inf := range services {
		_, _ = inf.AddEventHandler(remote.OnAny(func(o any) { g.touch(objectKey(o)) }))
	}
	_, _ = slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { g.touch(sliceKey(o)) },
		UpdateFunc: func(old, o any) {
			g.touch(sliceKey(old))
			g.touch(sliceKey(o))
		},
		DeleteFunc: func(o any) { g.touch(sliceKey(o)) },
	})
}

// touch marks the streams of the Service key for the next sweep.
func (g *streamGuard) touch(key string) {
	g.mu.Lock()
	_, has := g.streams[key]
	if has {
		g.dirty[key] = true
	}
	g.mu.Unlock()
	if has {
		g.wake()
	}
}

// Recheck marks every stream for the next sweep: what a change of the
// allow-list calls.
func (g *streamGuard) Recheck() {
	g.mu.Lock()
	g.all = true
	g.mu.Unlock()
	g.wake()
}

func (g *streamGuard) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// add registers s, checks it at once, and returns what unregisters it.
func (g *streamGuard) add(s *guardedStream) (remove func()) {
	key := serviceKey(s.dest)
	g.mu.Lock()
	if g.streams[key] == nil {
		g.streams[key] = map[*guardedStream]struct{}{}
	}
	g.streams[key][s] = struct{}{}
	logger := g.logger
	g.mu.Unlock()
	if why := g.reason(s, nil); why != "" {
		g.end(logger, s, why)
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.streams[key], s)
		if len(g.streams[key]) == 0 {
			delete(g.streams, key)
		}
	}
}

// targets is what allowed said of a destination, kept for one sweep.
type targets struct {
	allowed map[netip.AddrPort]bool
	why     string
}

// reason returns why s is no longer allowed, or "". memo, when set, keeps
// each destination's targets for the sweep: the streams of one Service
// cost one look at its EndpointSlices.
func (g *streamGuard) reason(s *guardedStream, memo map[Destination]targets) string {
	if s.allowed != nil && !s.allowed() {
		return streamClusterNotAllowed
	}
	t, ok := memo[s.dest]
	if !ok {
		t.allowed, t.why = g.allowed(s.dest)
		if memo != nil {
			memo[s.dest] = t
		}
	}
	switch {
	case t.why != "":
		return t.why
	case !t.allowed[s.target]:
		return streamEndpointGone
	}
	return ""
}

// end aborts both sides of s, once.
func (g *streamGuard) end(logger klog.Logger, s *guardedStream, why string) {
	s.once.Do(func() {
		streamsEnded.WithLabelValues(s.peer, why).Inc()
		logger.V(1).Info("Ended a stream no longer allowed", "peer", s.peer, "destination", s.dest.String(), "target", s.target.String(), "reason", why)
		for _, c := range s.conns {
			abort(c)
		}
	})
}

// run sweeps on every mark, and all streams every interval, until ctx
// ends.
func (g *streamGuard) run(ctx context.Context, logger klog.Logger, interval time.Duration) {
	g.mu.Lock()
	g.logger = logger
	g.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		case <-t.C:
			g.mu.Lock()
			g.all = true
			g.mu.Unlock()
		}
		g.sweep()
	}
}

// sweep checks the marked streams and ends those no longer allowed.
func (g *streamGuard) sweep() {
	g.mu.Lock()
	var check []*guardedStream
	for key, ss := range g.streams {
		if g.all || g.dirty[key] {
			for s := range ss {
				check = append(check, s)
			}
		}
	}
	g.all = false
	clear(g.dirty)
	logger := g.logger
	g.mu.Unlock()
	memo := map[Destination]targets{}
	for _, s := range check {
		if why := g.reason(s, memo); why != "" {
			g.end(logger, s, why)
		}
	}
}

// Guard registers an established stream from peer to target for d, which
// is ended (conns aborted) once d or target is no longer allowed, or
// allowed (when set) says the peer's cluster no longer is. It returns what
// unregisters the stream when it ends.
func (e *Exports) Guard(peer string, d Destination, target netip.AddrPort, allowed func() bool, conns ...net.Conn) (release func()) {
	return e.guard.add(&guardedStream{peer: peer, dest: d, target: target, allowed: allowed, conns: conns})
}

// streamGuarder is a Resolver that can end streams (Exports).
type streamGuarder interface {
	Guard(peer string, d Destination, target netip.AddrPort, allowed func() bool, conns ...net.Conn) func()
}

// guardStream registers an established stream with the Resolver when it
// can end streams that are no longer allowed (Exports can), and returns
// what unregisters it: the one call the ingress makes.
func (in *Ingress) guardStream(peer string, d Destination, target netip.AddrPort, conns ...net.Conn) (release func()) {
	g, ok := in.Resolver.(streamGuarder)
	if !ok {
		return func() {}
	}
	allowed := func() bool { return in.AllowClusters == nil || in.AllowClusters[peer] }
	return g.Guard(peer, d, target, allowed, conns...)
}

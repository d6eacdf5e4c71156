package remote

// The lifecycle of linked clusters: a link from the configuration or from
// a link Secret is added, its kubeconfig changes, it is removed. Each
// consumer (the controller, the DNS plugin) keeps its own watches of a
// cluster, a Generation; Links decides when one starts, serves and stops.

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/mcmirror/mcmirror/internal/link"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A Generation is the watches of one cluster through one client: a
// kubeconfig that changes makes a new one.
type Generation interface {
	// Start runs the watches until ctx ends; it returns at once.
	Start(ctx context.Context)
	// HasSynced reports whether every watch has delivered its first list.
	HasSynced() bool
}

// Consumer is told of the generations of the linked clusters, one call at
// a time and in order. It may read the Links (Get, Names, Serving) but
// not change them.
type Consumer[G Generation] interface {
	// New makes a generation of the watches of cluster name through
	// client, narrowed to the namespaces ns (Requests); it does not start
	// them. replacement says another generation of the name serves.
	New(name string, client kubernetes.Interface, ns link.Namespaces, replacement bool) G
	// Serve is told that g serves cluster name from now, in place of old
	// (replaced false when g is the first), whose watches have stopped.
	Serve(name string, g, old G, replaced bool)
	// Stop is told that the watches of g stopped without it serving
	// again: a replacement that gave way to a newer one before it synced
	// (removed false), or the generation that served a cluster that is
	// unlinked (removed true).
	Stop(name string, g G, removed bool)
}

// Links holds the linked clusters of one consumer and their generations.
// A cluster whose kubeconfig or namespaces change is watched anew; the
// generation that serves keeps serving until the new one has synced, so
// the change costs no gap, and if the new one never syncs the old one goes
// on as a link that breaks would. It implements link.Handler.
type Links[G Generation] struct {
	local    string
	consumer Consumer[G]

	// change serialises the changes with the consumer's calls.
	change sync.Mutex

	mu       sync.Mutex
	ctx      context.Context // set by Start
	clusters map[string]*linked[G]
	names    []string // sorted; replaced, never modified
}

type linked[G Generation] struct {
	g      G
	ctx    context.Context // set when started
	cancel context.CancelFunc
	// next is the replacement being synced, if any.
	next *linked[G]
}

// NewLinks returns the links of consumer. A link to local, the cluster the
// consumer runs in, is ignored.
func NewLinks[G Generation](local string, consumer Consumer[G]) *Links[G] {
	return &Links[G]{local: local, consumer: consumer, clusters: map[string]*linked[G]{}}
}

// Add links cluster name through cfg, narrowed to the namespaces ns, or
// watches it anew so if it is linked.
func (l *Links[G]) Add(name string, cfg *rest.Config, ns link.Namespaces) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "Cannot link cluster", "cluster", name)
		return
	}
	l.AddNarrowed(name, client, ns)
}

// AddClient links cluster name through client, every namespace of it, or
// watches it anew so if it is linked.
func (l *Links[G]) AddClient(name string, client kubernetes.Interface) {
	l.AddNarrowed(name, client, link.Namespaces{})
}

// AddNarrowed links cluster name through client, narrowed to the
// namespaces ns, or watches it anew so if it is linked.
func (l *Links[G]) AddNarrowed(name string, client kubernetes.Interface, ns link.Namespaces) {
	if name == l.local {
		klog.InfoS("Ignoring a link to the local cluster", "cluster", name)
		return
	}
	l.change.Lock()
	defer l.change.Unlock()
	l.mu.Lock()
	cur, linkedNow := l.clusters[name]
	running := l.ctx != nil
	l.mu.Unlock()
	if !ns.All() {
		klog.InfoS("Linked cluster narrowed to some namespaces", "cluster", name, "namespaces", ns.String())
	}
	g := l.consumer.New(name, client, ns, linkedNow)
	gen := &linked[G]{g: g}
	if !linkedNow || !running {
		// Nothing serves yet, or nothing runs: the new one serves at once.
		l.mu.Lock()
		if !linkedNow {
			l.names = append(slices.Clone(l.names), name) // a new slice: Names hands out the old one
			slices.Sort(l.names)
		}
		l.clusters[name] = gen
		l.mu.Unlock()
		var old G
		if linkedNow {
			l.end(cur)
			old = cur.g
		}
		l.consumer.Serve(name, g, old, linkedNow)
		l.start(gen)
		return
	}
	l.mu.Lock()
	prev := cur.next
	cur.next = gen
	l.mu.Unlock()
	if prev != nil { // an earlier replacement that had not synced
		l.end(prev)
		l.consumer.Stop(name, prev.g, false)
	}
	l.start(gen)
	go l.takeOver(name, cur, gen)
}

// takeOver makes next serve cluster name in place of cur once it has
// synced, unless it was replaced or removed meanwhile.
func (l *Links[G]) takeOver(name string, cur, next *linked[G]) {
	if !cache.WaitForCacheSync(l.ctxOf(next).Done(), next.g.HasSynced) {
		return // replaced again, removed, or stopped
	}
	l.change.Lock()
	defer l.change.Unlock()
	l.mu.Lock()
	if l.clusters[name] != cur || cur.next != next {
		l.mu.Unlock()
		return
	}
	l.clusters[name] = next
	l.mu.Unlock()
	l.end(cur)
	l.consumer.Serve(name, next.g, cur.g, true)
	klog.InfoS("Linked cluster watched with its new configuration", "cluster", name)
}

// Remove unlinks cluster name.
func (l *Links[G]) Remove(name string) {
	l.change.Lock()
	defer l.change.Unlock()
	l.mu.Lock()
	cur, ok := l.clusters[name]
	if ok {
		delete(l.clusters, name)
		l.names = slices.DeleteFunc(slices.Clone(l.names), func(n string) bool { return n == name })
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	if cur.next != nil {
		l.end(cur.next)
		l.consumer.Stop(name, cur.next.g, false)
	}
	l.end(cur)
	l.consumer.Stop(name, cur.g, true)
}

// Start runs every generation, and from now on each one added, until ctx
// ends.
func (l *Links[G]) Start(ctx context.Context) {
	l.change.Lock()
	defer l.change.Unlock()
	l.mu.Lock()
	l.ctx = ctx
	all := slices.Collect(maps.Values(l.clusters))
	l.mu.Unlock()
	for _, c := range all {
		l.start(c)
	}
}

// Stop stops every generation, each told to the consumer as replaced
// (removed false): the consumer stops, its links are not removed.
func (l *Links[G]) Stop() {
	l.change.Lock()
	defer l.change.Unlock()
	l.mu.Lock()
	names := slices.Clone(l.names)
	l.mu.Unlock()
	for _, name := range names {
		l.mu.Lock()
		cur := l.clusters[name]
		next := cur.next
		l.mu.Unlock()
		for _, c := range []*linked[G]{next, cur} {
			if c != nil {
				l.end(c)
				l.consumer.Stop(name, c.g, false)
			}
		}
	}
}

// Get returns the generation that serves cluster name.
func (l *Links[G]) Get(name string) (G, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.clusters[name]; ok {
		return c.g, true
	}
	var zero G
	return zero, false
}

// Names returns the names of the linked clusters, sorted. The slice is
// shared: it must not be modified.
func (l *Links[G]) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names
}

// Serving returns the generation that serves each linked cluster, in the
// order of their names.
func (l *Links[G]) Serving() []G {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]G, 0, len(l.names))
	for _, n := range l.names {
		out = append(out, l.clusters[n].g)
	}
	return out
}

// start runs c if Start has run; with l.change held.
func (l *Links[G]) start(c *linked[G]) {
	l.mu.Lock()
	if l.ctx == nil || c.cancel != nil {
		l.mu.Unlock()
		return
	}
	c.ctx, c.cancel = context.WithCancel(l.ctx)
	ctx := c.ctx
	l.mu.Unlock()
	c.g.Start(ctx)
}

// end stops c's watches; with l.change held.
func (l *Links[G]) end(c *linked[G]) {
	l.mu.Lock()
	cancel := c.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (l *Links[G]) ctxOf(c *linked[G]) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.ctx
}

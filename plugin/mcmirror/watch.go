package mcmirror

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// watcher is the informer layer: it watches the local cluster and every
// linked cluster, keeps their trimmed objects, and feeds the index. Event
// handlers only compute the service group an object belongs to and queue
// it; one worker rebuilds queued groups, so two builds of a group never race
// and a burst of events for one group costs one build.
type watcher struct {
	local string
	// ways are the ways a cluster exports a Service, in the order of
	// serviceStores: the export selector (Linkerd's label; never a
	// mirror), the ServiceExport stamp its controller writes, and the
	// members of federated Services. A selector cannot OR two keys: each
	// is a watch of Services, and one of their slices.
	ways [3]remote.Way
	// startupTimeout is how long a link that cannot sync holds up
	// readiness.
	startupTimeout time.Duration
	// clusterset has the local cluster's derived Services watched, for
	// the clusterset zones; set before the local cluster is added.
	clusterset bool
	// staleMaxAge is stale_max_age: how long the last known state of a
	// linked cluster whose watches fail is answered; 0 is forever.
	staleMaxAge time.Duration
	// backoff is how the watches of a cluster retry while it fails: it
	// bounds how long a cluster that comes back waits to be watched again.
	backoff wait.Backoff
	// sync rebuilds a group: the index's.
	sync  func(object.GroupKey) []object.GroupKey
	queue *workqueue.Typed[object.GroupKey]
	// inflight is the number of groups being rebuilt, for the first sync.
	inflight atomic.Int32
	// ready latches the first sync: from then on the index answers from
	// what it holds (NXDOMAIN, not SERVFAIL), whatever is being rebuilt or
	// linked later, as the kubernetes plugin does.
	ready atomic.Bool
	// knowsLinks is set with ready, while the instance runs: it knows
	// every link it has, for the lifetime of the clusters' series
	// (linkseries.go).
	knowsLinks atomic.Bool

	mu       sync.RWMutex
	stopped  bool // stop has run
	clusters map[string]*cluster
	links    []string // the linked clusters' names, sorted; replaced, never modified
	ctx      context.Context
	cancel   context.CancelFunc
	started  time.Time

	// relists lets one store relist at a time.
	relists *relistGate

	// secrets, when set, adds and removes links from link Secrets.
	secrets *link.SecretWatcher

	// triggers are the oldest unprocessed change times of queued groups,
	// for the programming latency metric.
	triggersMu sync.Mutex
	triggers   map[object.GroupKey]trigger
}

type trigger struct {
	at      time.Time
	cluster string
}

// cluster is one generation of the watches of one cluster: a kubeconfig
// that changes makes a new one, which takes over once it has synced.
type cluster struct {
	name   string
	local  bool
	client kubernetes.Interface

	services    *objectStore // Services the export selector exports
	mcsServices *objectStore // Services a ServiceExport exports (the stamp)
	fedServices *objectStore // federated members (federated_watch.go)
	// slices are the EndpointSlices of the Services of each of
	// serviceStores, selected on the API server by the same way.
	slices  [3]*objectStore
	mirrors *objectStore // mirror Services; local cluster only
	derived *objectStore // derived Services; local cluster, with clusterset

	// health is whether the watches work, and owns the cluster's metric
	// series while this generation serves it.
	health *linkHealth

	started time.Time // when its watches started, for the startup timeout
	ctx     context.Context
	cancel  context.CancelFunc
	// next is the replacement being synced after a kubeconfig change;
	// guarded by watcher.mu.
	next   *cluster
	synced atomic.Bool
}

const (
	objService = iota
	objSlice
	objMirror
	objMCSService
	objDerived
	objFedService
)

var objKinds = [...]string{"service", "endpointslice", "mirror", "mcs-service", "derived", "federated-service"}

const sliceServiceIndex = "service"

// linkBackoff is how the reflectors retry what remote.Requests does not
// (a 410 Expired, a 429): as remote.Backoff.
var linkBackoff = remote.Backoff

func newWatcher(local string, export k8slabels.Selector, startupTimeout time.Duration) *watcher {
	return &watcher{
		local:          local,
		ways:           [3]remote.Way{remote.Selected(export), remote.Stamped, remote.Federated},
		startupTimeout: startupTimeout,
		backoff:        linkBackoff,
		queue:          workqueue.NewTyped[object.GroupKey](),
		clusters:       map[string]*cluster{},
		triggers:       map[object.GroupKey]trigger{},
		relists:        newRelistGate(relistBusy),
	}
}

// addCluster watches the cluster client talks to, from now if the
// watcher runs, else from start.
func (c *watcher) addCluster(name string, client kubernetes.Interface) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.clusters[name]; ok {
		return fmt.Errorf("cluster %q is already watched", name)
	}
	cl := c.newCluster(name, client)
	cl.health.own()
	c.clusters[name] = cl
	if !cl.local {
		links := append(slices.Clone(c.links), name)
		slices.Sort(links)
		c.links = links
	}
	if c.ctx != nil {
		c.startCluster(cl)
	}
	return nil
}

// replaceCluster watches a linked cluster through a new client (its
// kubeconfig changed). The old watches keep serving, and own the metrics,
// until the new ones have synced, so the change costs no gap; if the new
// ones never sync, the last known state stays, as for any link that breaks.
func (c *watcher) replaceCluster(name string, client kubernetes.Interface) error {
	c.mu.Lock()
	old, ok := c.clusters[name]
	if !ok || c.ctx == nil {
		c.mu.Unlock()
		if ok {
			c.removeCluster(name)
		}
		return c.addCluster(name, client)
	}
	if old.local {
		c.mu.Unlock()
		return fmt.Errorf("cluster %q is the local cluster", name)
	}
	next := c.newCluster(name, client)
	if old.next != nil {
		old.next.cancel() // an earlier replacement that had not synced
		old.next.health.stop(false)
	}
	old.next = next
	c.startCluster(next)
	c.mu.Unlock()

	go func() {
		ctx := next.ctx
		if !cache.WaitForCacheSync(ctx.Done(), next.synced.Load) {
			return // replaced again, removed, or stopped
		}
		c.mu.Lock()
		if c.clusters[name] != old || old.next != next {
			c.mu.Unlock()
			return
		}
		c.clusters[name] = next
		old.health.stop(false)
		next.health.own()
		c.mu.Unlock()
		old.cancel()
		c.enqueueAll(old)
		c.enqueueAll(next)
		log.Infof("Cluster %s: now watched with its new configuration", name)
	}()
	return nil
}

// enqueueAll queues every group a cluster exports, either way, or
// federates (and so the federated groups: index.federations).
func (c *watcher) enqueueAll(cl *cluster) {
	for _, st := range cl.serviceStores() {
		for _, obj := range st.idx.List() {
			if s, ok := obj.(*object.Service); ok {
				c.enqueue(object.ServiceKey(s.Namespace, s.Name))
			}
		}
	}
}

// removeCluster stops watching a linked cluster and drops its names and
// its metric series, which no late event of its watches writes again.
func (c *watcher) removeCluster(name string) {
	c.mu.Lock()
	cl, ok := c.clusters[name]
	if !ok || cl.local {
		c.mu.Unlock()
		return
	}
	delete(c.clusters, name)
	c.links = slices.DeleteFunc(slices.Clone(c.links), func(n string) bool { return n == name })
	next := cl.next
	c.mu.Unlock()

	if next != nil {
		next.cancel()
		next.health.stop(false)
	}
	if cl.cancel != nil {
		cl.cancel()
	}
	cl.health.stop(true)
	// Every group the cluster exported loses its share.
	c.enqueueAll(cl)
	log.Infof("Stopped watching cluster %s", name)
}

// start starts every watch and the worker; it does not wait for them.
func (c *watcher) start() {
	c.mu.Lock()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.started = time.Now()
	for _, cl := range c.clusters {
		c.startCluster(cl)
	}
	ctx := c.ctx
	c.mu.Unlock()
	if c.secrets != nil {
		go c.secrets.Run(ctx)
	}
	go c.work()
}

// stop stops every watch and the worker.
func (c *watcher) stop() {
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	// Another instance that knows its links (the new one of a reload)
	// decides for the clusters only this one watched.
	c.stopped = true
	if c.knowsLinks.CompareAndSwap(true, false) {
		instanceStopped()
	}
	for _, cl := range c.clusters {
		cl.health.stop(false)
		if cl.next != nil {
			cl.next.health.stop(false)
		}
	}
	c.mu.Unlock()
	c.queue.ShutDown()
}

// startCluster runs the watches of cl: per way of export its Services
// and their slices, and the local cluster's mirrors and derived Services.
func (c *watcher) startCluster(cl *cluster) {
	ctx, cancel := context.WithCancel(c.ctx)
	cl.ctx, cl.cancel = ctx, cancel
	cl.started = time.Now()
	// The reflectors' own error log would repeat at every retry: the
	// health logs each change once.
	quiet := klog.NewContext(ctx, klog.Logger{})
	for i, st := range cl.serviceStores() {
		w := c.ways[i]
		go c.reflector(cl, 2*i, remote.Services, w.Services.String(), st).RunWithContext(quiet)
		go c.reflector(cl, 2*i+1, remote.EndpointSlices, w.Slices().String(), cl.slices[i]).RunWithContext(quiet)
	}
	if cl.mirrors != nil {
		go c.reflector(cl, watchMirrors, remote.Services, labels.MirrorSelector, cl.mirrors).RunWithContext(quiet)
	}
	if cl.derived != nil {
		go c.reflector(cl, watchDerived, remote.Services, labels.DerivedSelector, cl.derived).RunWithContext(quiet)
	}
	go cl.watchSync(ctx)
}

// watchSync records when the cluster has synced.
func (cl *cluster) watchSync(ctx context.Context) {
	var synced []cache.InformerSynced
	for i, st := range cl.serviceStores() {
		synced = append(synced, st.HasSynced, cl.slices[i].HasSynced)
	}
	if cl.mirrors != nil {
		synced = append(synced, cl.mirrors.HasSynced)
	}
	if cl.derived != nil {
		synced = append(synced, cl.derived.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	cl.synced.Store(true)
	cl.health.setSynced()
	log.Infof("Synced with cluster %s", cl.name)
}

// work rebuilds queued groups until the queue shuts down.
func (c *watcher) work() {
	for {
		k, quit := c.queue.Get()
		if quit {
			return
		}
		c.inflight.Add(1)
		again := c.sync(k)
		c.observe(k)
		for _, a := range again {
			c.queue.Add(a)
		}
		c.queue.Done(k)
		c.inflight.Add(-1)
	}
}

func (c *watcher) enqueue(k object.GroupKey) { c.queue.Add(k) }

// noteTrigger remembers the oldest change not yet in the index of group k.
func (c *watcher) noteTrigger(k object.GroupKey, cluster string, at time.Time) {
	c.triggersMu.Lock()
	defer c.triggersMu.Unlock()
	if t, ok := c.triggers[k]; !ok || at.Before(t.at) {
		c.triggers[k] = trigger{at: at, cluster: cluster}
	}
}

func (c *watcher) observe(k object.GroupKey) {
	c.triggersMu.Lock()
	t, ok := c.triggers[k]
	delete(c.triggers, k)
	c.triggersMu.Unlock()
	if !ok {
		return
	}
	if cl := c.cluster(t.cluster); cl != nil {
		cl.health.latency(time.Since(t.at))
	}
}

// HasSynced reports whether the index is ready to answer. Until the first
// sync it waits for the local cluster and the link Secrets, for every link
// to sync or to have had startupTimeout to do so, and for the index to
// catch up with what they said; a link that cannot be reached does not hold
// DNS up for longer than that. From then on it stays true: a group being
// rebuilt, a link added later, or one that fails does not make the server
// unready or its answers SERVFAIL (link_synced, link_up and the log say
// what a link is doing).
func (c *watcher) HasSynced() bool {
	if c.ready.Load() {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ctx == nil {
		return false
	}
	if c.secrets != nil && !c.secrets.HasSynced() {
		return false
	}
	for _, cl := range c.clusters {
		if cl.synced.Load() {
			continue
		}
		if cl.local || time.Since(cl.started) < c.startupTimeout {
			return false
		}
	}
	if c.queue.Len() > 0 || c.inflight.Load() > 0 {
		return false
	}
	c.ready.Store(true)
	if !c.stopped && c.knowsLinks.CompareAndSwap(false, true) {
		instanceReady()
	}
	return true
}

// unsynced returns the clusters that have not synced, for the log.
func (c *watcher) unsynced() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var names []string
	for n, cl := range c.clusters {
		if !cl.synced.Load() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// The source interface, read by the index.

// Links implements source.
func (c *watcher) Links() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.links
}

func (c *watcher) cluster(name string) *cluster {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.clusters[name]
}

// Service implements source: the Service as the export selector's watch
// holds it, else as the ServiceExport stamp's does.
func (c *watcher) Service(cluster, ns, name string) *object.Service {
	cl := c.cluster(cluster)
	if cl == nil || cl.health.withdrawn.Load() {
		return nil
	}
	return cl.service(ns + "/" + name)
}

// Slices implements source: the slices of the Service that every way
// holds, each once.
func (c *watcher) Slices(cluster, ns, name string) []*object.Slice {
	cl := c.cluster(cluster)
	if cl == nil || cl.health.withdrawn.Load() {
		return nil
	}
	return cl.slicesOf(ns + "/" + name)
}

// slicesOf returns the slices of Service key that the cluster holds.
func (cl *cluster) slicesOf(key string) []*object.Slice {
	var out []*object.Slice
	for _, st := range cl.slices {
		objs, err := st.idx.ByIndex(sliceServiceIndex, key)
		if err != nil {
			continue
		}
		for _, obj := range objs {
			if s, ok := obj.(*object.Slice); ok && !slices.ContainsFunc(out, func(o *object.Slice) bool { return o.Name == s.Name }) {
				out = append(out, s)
			}
		}
	}
	return out
}

// Mirror implements source.
func (c *watcher) Mirror(ns, name string) *object.Mirror {
	cl := c.cluster(c.local)
	if cl == nil || cl.mirrors == nil {
		return nil
	}
	obj, ok, _ := cl.mirrors.idx.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	if m, _ := obj.(*object.Mirror); m != nil && m.IsMirror {
		return m
	}
	return nil
}

// newCluster makes the stores of one generation of a cluster's watches:
// its exported Services (one store per way of exporting), its federated
// members, their EndpointSlices, and, in the local cluster, the mirror
// Services. Only what can be answered is sent: each watch selects on the
// API server (remote.Way), and a Service that stopped matching (a watch
// that does not filter) is dropped as it comes.
func (c *watcher) newCluster(name string, client kubernetes.Interface) *cluster {
	cl := &cluster{name: name, local: name == c.local, client: client}
	cl.health = newLinkHealth(name, cl.local, c.staleMaxAge, func(bool) { c.enqueueAll(cl) })

	exported := func(obj any) bool {
		s, ok := obj.(*object.Service)
		return ok && s.Exported
	}
	cl.services = newObjectStore(serviceTransform(c.ways[0].Services), exported, nil, c.serviceHandler(cl, objService))
	cl.mcsServices = newObjectStore(serviceTransform(c.ways[1].Services), exported, nil, c.serviceHandler(cl, objMCSService))
	cl.fedServices = newObjectStore(fedTransform(c.ways[2].Services), exported, nil, c.serviceHandler(cl, objFedService))
	// Every slice the API server sends is of a Service exported the
	// slice watch's way (remote.Way.Slices): all are held, even one that
	// comes before its Service; one that stopped matching (a watch that
	// does not filter) is dropped.
	for i := range cl.slices {
		cl.slices[i] = newObjectStore(sliceTransform(c.ways[i].Slices()), isSlice, cache.Indexers{sliceServiceIndex: func(obj any) ([]string, error) {
			s, ok := obj.(*object.Slice)
			if !ok || s.Service == "" {
				return nil, nil
			}
			return []string{s.Namespace + "/" + s.Service}, nil
		}}, c.sliceHandler(cl))
	}
	if cl.local {
		cl.mirrors = newObjectStore(object.ToMirror, func(obj any) bool {
			m, ok := obj.(*object.Mirror)
			return ok && m.IsMirror
		}, fedIndexers(), c.mirrorHandler(cl))
	}
	if cl.local && c.clusterset {
		cl.derived = c.newDerivedStore(cl)
		cl.health.derived = true
	}
	for _, s := range append([]*objectStore{cl.services, cl.mcsServices, cl.fedServices, cl.mirrors, cl.derived}, cl.slices[:]...) {
		if s != nil {
			s.bookmark = cl.health.contact
		}
	}
	return cl
}

// Package watch is the informer layer of the mcmirror plugin: it watches
// the local cluster and every linked cluster (static links, link Secrets),
// keeps their trimmed objects, tells the health of each link (logs and
// metrics, stale_max_age), relists one at a time, and feeds the index: each
// change queues the group it touches, and one worker has the index rebuild
// queued groups (Index). The Watcher is the index's Source.
package watch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// Index is what the watches feed: Sync rebuilds a group from what the
// Watcher holds, and returns the groups it asks to be rebuilt too
// (index.Index).
type Index interface {
	Sync(k object.GroupKey) []object.GroupKey
}

// Options are the settings of a Watcher.
type Options struct {
	// Cluster is the local cluster's name.
	Cluster string
	// ExportSelector selects exported Services; nil means
	// labels.DefaultExportSelector.
	ExportSelector k8slabels.Selector
	// StartupTimeout is how long a link that cannot sync holds up
	// readiness (HasSynced).
	StartupTimeout time.Duration
	// StaleMaxAge is stale_max_age: how long the last known state of a
	// linked cluster whose watches fail is answered; 0 is forever.
	StaleMaxAge time.Duration
	// ClusterSet has the local cluster's derived Services watched, for
	// the clusterset zones (Derived).
	ClusterSet bool
	// Import is import mode (source import): no cluster but the local one
	// is watched, and the linked clusters' exports are read from the
	// mirrors the controller writes there (imported.go). AddLink refuses.
	Import bool
}

// Watcher is the informer layer: it watches the local cluster and every
// linked cluster, keeps their trimmed objects, and feeds the index. Event
// handlers only compute the service group an object belongs to and queue
// it; one worker rebuilds queued groups, so two builds of a group never race
// and a burst of events for one group costs one build.
type Watcher struct {
	local string
	// ways are the ways a cluster exports a Service, in the order of
	// serviceStores: the export selector (Linkerd's label; never a
	// mirror), the ServiceExport stamp its controller writes, and the
	// members of federated Services. A selector cannot OR two keys: each
	// is a watch of Services, and one of their slices.
	ways [3]remote.Way
	// The Options'; clusterset is set before the local cluster is added.
	startupTimeout time.Duration
	clusterset     bool
	imports        bool
	staleMaxAge    time.Duration
	// backoff is how the watches of a cluster retry while it fails: it
	// bounds how long a cluster that comes back waits to be watched again.
	backoff wait.Backoff
	// index rebuilds a group; set by Start.
	index Index
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

	// localCluster is the local cluster's watches.
	localCluster *cluster
	// links are the linked clusters' (cluster.go).
	links *remote.Links[*cluster]

	mu      sync.RWMutex
	stopped bool // stop has run
	ctx     context.Context
	cancel  context.CancelFunc

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

// New returns a Watcher of the local cluster, through local. Links are
// added with AddLink (or link Secrets, WatchSecrets); Start starts
// watching.
func New(local kubernetes.Interface, o Options) (*Watcher, error) {
	if err := labels.ValidateClusterName(o.Cluster); err != nil {
		return nil, err
	}
	sel := o.ExportSelector
	if sel == nil {
		var err error
		if sel, err = k8slabels.Parse(labels.DefaultExportSelector); err != nil {
			return nil, err
		}
	}
	c := &Watcher{
		local:          o.Cluster,
		ways:           [3]remote.Way{remote.Selected(sel), remote.Stamped, remote.Federated},
		startupTimeout: o.StartupTimeout,
		staleMaxAge:    o.StaleMaxAge,
		clusterset:     o.ClusterSet,
		imports:        o.Import,
		backoff:        remote.Backoff, // for what remote.Requests does not retry (a 410 Expired, a 429)
		queue:          workqueue.NewTyped[object.GroupKey](),
		triggers:       map[object.GroupKey]trigger{},
		relists:        newRelistGate(relistBusy),
	}
	c.localCluster = c.newCluster(o.Cluster, local)
	c.localCluster.health.own()
	c.links = remote.NewLinks(o.Cluster, linkConsumer{c})
	return c, nil
}

// AddLink watches a linked cluster through client, every namespace of it
// (AddNarrowedLink).
func (c *Watcher) AddLink(name string, client kubernetes.Interface) error {
	return c.AddNarrowedLink(name, client, link.Namespaces{})
}

// ReplaceLink watches a linked cluster through client, every namespace of
// it (ReplaceNarrowedLink).
func (c *Watcher) ReplaceLink(name string, client kubernetes.Interface) error {
	return c.ReplaceNarrowedLink(name, client, link.Namespaces{})
}

// RemoveLink stops watching a linked cluster; its names go away.
func (c *Watcher) RemoveLink(name string) { c.links.Remove(name) }

// WatchSecrets has the links that s finds in link Secrets added and removed;
// Start starts s.
func (c *Watcher) WatchSecrets(s *link.SecretWatcher) { c.secrets = s }

// Start starts every watch, and the worker that has ix rebuild the groups
// they queue; it does not wait for them (HasSynced).
func (c *Watcher) Start(ix Index) {
	c.index = ix
	c.mu.Lock()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ctx := c.ctx
	c.mu.Unlock()
	c.localCluster.Start(ctx)
	c.links.Start(ctx)
	if c.secrets != nil {
		go c.secrets.Run(ctx)
	}
	go c.work()
}

// Stop stops every watch and the worker.
func (c *Watcher) Stop() {
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
	c.mu.Unlock()
	c.links.Stop()
	c.localCluster.health.stop(false)
	c.queue.ShutDown()
}

// work rebuilds queued groups until the queue shuts down.
func (c *Watcher) work() {
	for {
		k, quit := c.queue.Get()
		if quit {
			return
		}
		c.inflight.Add(1)
		again := c.index.Sync(k)
		c.observe(k)
		for _, a := range again {
			c.queue.Add(a)
		}
		c.queue.Done(k)
		c.inflight.Add(-1)
	}
}

// Enqueue has group k rebuilt.
func (c *Watcher) Enqueue(k object.GroupKey) { c.queue.Add(k) }

// noteTrigger remembers the oldest change not yet in the index of group k.
func (c *Watcher) noteTrigger(k object.GroupKey, cluster string, at time.Time) {
	c.triggersMu.Lock()
	defer c.triggersMu.Unlock()
	if t, ok := c.triggers[k]; !ok || at.Before(t.at) {
		c.triggers[k] = trigger{at: at, cluster: cluster}
	}
}

func (c *Watcher) observe(k object.GroupKey) {
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
func (c *Watcher) HasSynced() bool {
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
	if c.localCluster.waiting(c.startupTimeout) {
		return false
	}
	for _, cl := range c.links.Serving() {
		if cl.waiting(c.startupTimeout) {
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

// Unsynced returns the clusters that have not synced, for the log.
func (c *Watcher) Unsynced() []string {
	var names []string
	if !c.localCluster.synced.Load() {
		names = append(names, c.local)
	}
	for _, cl := range c.links.Serving() {
		if !cl.synced.Load() {
			names = append(names, cl.name)
		}
	}
	slices.Sort(names)
	return names
}

// The index.Source interface, read by the index.

var _ index.Source = (*Watcher)(nil)

// Links implements index.Source: the linked clusters; in import mode,
// those the local mirrors stand for.
func (c *Watcher) Links() []string {
	if c.imports {
		return c.importedLinks()
	}
	return c.links.Names()
}

// Service implements index.Source: the Service as the export selector's watch
// holds it, else as the ServiceExport stamp's does; in import mode, a
// linked cluster's as its mirror says.
func (c *Watcher) Service(cluster, ns, name string) *object.Service {
	if c.imports && cluster != c.local {
		if m := c.importedMirror(cluster, ns, name); m != nil {
			return m.Export
		}
		return nil
	}
	cl := c.cluster(cluster)
	if cl == nil || cl.health.withdrawn.Load() {
		return nil
	}
	return cl.service(ns + "/" + name)
}

// Slices implements index.Source: the slices of the Service that every way
// holds, each once; in import mode, a linked cluster's are its mirror's.
func (c *Watcher) Slices(cluster, ns, name string) []*object.Slice {
	if c.imports && cluster != c.local {
		return c.importedSlices(cluster, ns, name)
	}
	cl := c.cluster(cluster)
	if cl == nil || cl.health.withdrawn.Load() {
		return nil
	}
	return cl.slicesOf(ns + "/" + name)
}

// Mirror implements index.Source.
func (c *Watcher) Mirror(ns, name string) *object.Mirror {
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

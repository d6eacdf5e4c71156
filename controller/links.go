package controller

// Linked clusters: each one's informers as a remote.Generation, which
// remote.Links starts, replaces and stops; and how their keys are enqueued.

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Add links cluster name through cfg, narrowed to the namespaces ns; it
// implements link.Handler.
func (c *Controller) Add(name string, cfg *rest.Config, ns link.Namespaces) {
	c.links.Add(name, cfg, ns)
}

// Remove unlinks cluster name; it implements link.Handler. Its mirrors are
// swept after LinkRemovalGrace unless the link comes back.
func (c *Controller) Remove(name string) { c.links.Remove(name) }

// linkConsumer is the controller as remote.Links sees it.
type linkConsumer struct{ c *Controller }

var (
	_ remote.Consumer[*remoteCluster] = linkConsumer{}
	_ remote.Generation               = (*remoteCluster)(nil)
)

// New makes the informers of link name, narrowed to ns.
func (lc linkConsumer) New(name string, client kubernetes.Interface, ns link.Namespaces, replacement bool) *remoteCluster {
	c := lc.c
	r := &remoteCluster{name: name, client: client, namespaces: ns, c: c}
	r.health = newLinkHealth(name, watchNames(c.ways), replacement, &r.serving)
	r.ways = linkWays(r, c.ways)
	// Fresh informers that have not run take handlers without error.
	// Every way's Services enqueue alike: a Service leaving one (Linkerd's
	// label or the ServiceExport stamp removed) is synced, and is still
	// exported while another holds it.
	onService := remote.OnAny(func(obj any) { c.onRemoteService(name, obj) })
	onSlice := remote.OnAny(func(obj any) { c.onRemoteSlice(r, obj) })
	for _, w := range r.ways {
		regS, _ := w.services.AddEventHandler(onService)
		regE, _ := w.slices.AddEventHandler(onSlice)
		r.handlersSynced = append(r.handlersSynced, regS.HasSynced, regE.HasSynced)
	}
	return r
}

// Serve is told that r serves its cluster, first or in place of old.
func (lc linkConsumer) Serve(name string, r, old *remoteCluster, replaced bool) {
	c := lc.c
	if replaced {
		// The old link's late results write nothing from now: the gauges
		// are the new one's.
		old.health.Stop()
	}
	r.serving.Store(true)
	linkUp.WithLabelValues(name).Set(b2f(r.health.Up()))
	if replaced {
		// What the new informers hold is synced: a Service the old ones
		// held and the new ones do not (its namespace no longer linked,
		// say) loses its mirrors and its part of the imports.
		c.enqueueCluster(r)
		c.enqueueMCS()
	} else {
		linkSynced.WithLabelValues(name).Set(b2f(r.synced.Load()))
		linkStartupTimeouts.WithLabelValues(name)
	}
	c.mu.Lock()
	delete(c.removed, name)
	c.mu.Unlock()
	linksGauge.Set(float64(len(c.links.Names())))
	klog.InfoS("Linked cluster", "cluster", name)
}

// Stop is told that r's informers stopped.
func (lc linkConsumer) Stop(name string, r *remoteCluster, removed bool) {
	c := lc.c
	r.health.Stop()
	if !removed {
		return
	}
	deleteLinkSeries(name)
	c.mu.Lock()
	delete(c.keptNoted, name)
	c.removed[name] = c.now()
	c.mu.Unlock()
	linksGauge.Set(float64(len(c.links.Names())))
	klog.InfoS("Unlinked cluster", "cluster", name, "sweepAfter", c.opts.LinkRemovalGrace)
	for _, k := range c.localKeysOfCluster(name) {
		c.queue.AddAfter(k, c.opts.LinkRemovalGrace)
	}
	// Its exports no longer conflict with ours.
	c.enqueueMCS()
}

// Start runs r's informers; it implements remote.Generation. Once their
// handlers have seen the first lists, every key of the cluster is
// enqueued; the imports the link takes part in wait for that for
// LinkStartupTimeout at most (importheld.go).
func (r *remoteCluster) Start(ctx context.Context) {
	c := r.c
	c.mu.Lock()
	r.startedAt = c.now()
	c.mu.Unlock()
	for _, inf := range r.informers() {
		go inf.Run(ctx.Done())
	}
	timer := time.AfterFunc(c.opts.LinkStartupTimeout, func() {
		if ctx.Err() == nil {
			c.linkStartupExpired(r)
		}
	})
	go func() {
		defer timer.Stop()
		if !cache.WaitForCacheSync(ctx.Done(), r.handlersSynced...) {
			return
		}
		r.synced.Store(true)
		linkSynced.WithLabelValues(r.name).Set(1)
		c.mu.Lock()
		delete(c.keptNoted, r.name) // its imports keep no part of it now
		c.mu.Unlock()
		klog.InfoS("Linked cluster synced", "cluster", r.name, "exported", len(r.exportedKeys()))
		c.enqueueCluster(r)
		r.enqueued.Store(true)
		c.enqueueMCS()
	}()
}

// HasSynced reports whether r's handlers have seen the first lists; it
// implements remote.Generation.
func (r *remoteCluster) HasSynced() bool { return r.synced.Load() }

// enqueueCluster enqueues every exported Service of r and every local key
// of r's mirrors.
func (c *Controller) enqueueCluster(r *remoteCluster) {
	for _, k := range r.exportedKeys() {
		c.queue.Add(makeKey(r.name, k.Namespace, k.Name))
	}
	for _, k := range c.localKeysOfCluster(r.name) {
		c.queue.Add(k)
	}
}

func (c *Controller) localKeysOfCluster(cluster string) []string {
	keys := map[string]bool{}
	for _, inf := range []cache.SharedIndexInformer{c.services, c.slices} {
		objs, _ := inf.GetIndexer().ByIndex(byCluster, cluster)
		for _, obj := range objs {
			if m, ok := obj.(metav1.Object); ok {
				if k, owned := ownedKey(m); owned {
					keys[k] = true
				}
			}
		}
	}
	return slices.Collect(maps.Keys(keys))
}

// link returns the linked cluster name, and how long a removed link's
// mirrors are still kept.
func (c *Controller) link(name string) (*remoteCluster, time.Duration) {
	if r, ok := c.links.Get(name); ok {
		return r, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.removed[name]; ok {
		if left := c.opts.LinkRemovalGrace - c.now().Sub(at); left > 0 {
			return nil, left
		}
	}
	return nil, 0
}

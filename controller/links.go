package controller

// Linked clusters: their informers, and how their keys are enqueued.

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Links returns the names of the linked clusters.
func (c *Controller) Links() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.links))
	for n := range c.links {
		out = append(out, n)
	}
	return out
}

// Add links cluster name through cfg; it implements link.Handler.
func (c *Controller) Add(name string, cfg *rest.Config) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "Cannot link cluster", "cluster", name)
		return
	}
	c.AddClient(name, client)
}

// AddClient links cluster name through client.
func (c *Controller) AddClient(name string, client kubernetes.Interface) {
	if name == c.opts.Cluster {
		klog.InfoS("Ignoring a link to the local cluster", "cluster", name)
		return
	}
	c.mu.Lock()
	_, replacement := c.links[name]
	c.mu.Unlock()
	r := &remoteCluster{name: name, client: client, health: newLinkHealth(name, watchNames(c.ways), replacement)}
	r.ways = linkWays(r, c.ways)
	// Fresh informers that have not run take handlers without error.
	// Every way's Services enqueue alike: a Service leaving one (Linkerd's
	// label or the ServiceExport stamp removed) is synced, and is still
	// exported while another holds it.
	onService := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onRemoteService(name, obj) },
		UpdateFunc: func(_, obj any) { c.onRemoteService(name, obj) },
		DeleteFunc: func(obj any) { c.onRemoteService(name, obj) },
	}
	onSlice := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onRemoteSlice(r, obj) },
		UpdateFunc: func(_, obj any) { c.onRemoteSlice(r, obj) },
		DeleteFunc: func(obj any) { c.onRemoteSlice(r, obj) },
	}
	for _, w := range r.ways {
		regS, _ := w.services.AddEventHandler(onService)
		regE, _ := w.slices.AddEventHandler(onSlice)
		r.handlersSynced = append(r.handlersSynced, regS.HasSynced, regE.HasSynced)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.links[name]; ok {
		if old.cancel != nil {
			old.cancel()
		}
		old.health.Stop()
	}
	c.links[name] = r
	delete(c.removed, name)
	linkSynced.WithLabelValues(name).Set(0)
	linkStartupTimeouts.WithLabelValues(name)
	linksGauge.Set(float64(len(c.links)))
	klog.InfoS("Linked cluster", "cluster", name)
	if c.running.Load() {
		c.startLink(c.ctx, r)
	}
}

// startLink runs a link's informers; when they have synced, every key of
// the cluster is enqueued. Called with c.mu held.
func (c *Controller) startLink(ctx context.Context, r *remoteCluster) {
	if r.started {
		return
	}
	r.started = true
	r.startedAt = c.now()
	ctx, r.cancel = context.WithCancel(ctx)
	for _, inf := range r.informers() {
		go inf.Run(ctx.Done())
	}
	// The imports the link takes part in wait for its sync this long
	// at most (importheld.go).
	timer := time.AfterFunc(c.opts.LinkStartupTimeout, func() {
		if ctx.Err() == nil {
			c.linkStartupExpired(r)
		}
	})
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), r.handlersSynced...) {
			timer.Stop()
			return
		}
		timer.Stop()
		r.synced.Store(true)
		linkSynced.WithLabelValues(r.name).Set(1)
		c.linkSyncedForImports(r.name)
		klog.InfoS("Linked cluster synced", "cluster", r.name, "exported", len(r.exportedKeys()))
		c.enqueueCluster(r)
		r.enqueued.Store(true)
		c.enqueueMCS()
	}()
}

// Remove unlinks cluster name; it implements link.Handler. Its mirrors are
// swept after LinkRemovalGrace unless the link comes back.
func (c *Controller) Remove(name string) {
	c.mu.Lock()
	r, ok := c.links[name]
	if ok {
		delete(c.links, name)
		if r.cancel != nil {
			r.cancel()
		}
		r.health.Stop()
		deleteLinkSeries(name)
		delete(c.keptNoted, name)
		c.removed[name] = c.now()
	}
	linksGauge.Set(float64(len(c.links)))
	c.mu.Unlock()
	if !ok {
		return
	}
	klog.InfoS("Unlinked cluster", "cluster", name, "sweepAfter", c.opts.LinkRemovalGrace)
	for _, k := range c.localKeysOfCluster(name) {
		c.queue.AddAfter(k, c.opts.LinkRemovalGrace)
	}
	// Its exports no longer conflict with ours.
	c.enqueueMCS()
}

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
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	return out
}

// link returns the linked cluster name, and how long a removed link's
// mirrors are still kept.
func (c *Controller) link(name string) (*remoteCluster, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.links[name]; ok {
		return r, 0
	}
	if at, ok := c.removed[name]; ok {
		if left := c.opts.LinkRemovalGrace - c.now().Sub(at); left > 0 {
			return nil, left
		}
	}
	return nil, 0
}

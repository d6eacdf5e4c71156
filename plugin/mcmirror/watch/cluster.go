package watch

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A cluster's watches: each generation of them (a kubeconfig that changes
// makes a new one, which takes over once it has synced), its stores, and
// their lifecycle (add, replace, remove, start).

// cluster is one generation of the watches of one cluster: a kubeconfig
// that changes makes a new one, which takes over once it has synced.
type cluster struct {
	name   string
	local  bool
	client kubernetes.Interface

	services    *objectStore // Services the export selector exports
	mcsServices *objectStore // Services a ServiceExport exports (the stamp)
	fedServices *objectStore // federated members (federated.go)
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
	// guarded by Watcher.mu.
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

// addCluster watches the cluster client talks to, from now if the
// Watcher runs, else from Start.
func (c *Watcher) addCluster(name string, client kubernetes.Interface) error {
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
func (c *Watcher) replaceCluster(name string, client kubernetes.Interface) error {
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
func (c *Watcher) enqueueAll(cl *cluster) {
	for _, st := range cl.serviceStores() {
		for _, obj := range st.idx.List() {
			if s, ok := obj.(*object.Service); ok {
				c.Enqueue(object.ServiceKey(s.Namespace, s.Name))
			}
		}
	}
}

// removeCluster stops watching a linked cluster and drops its names and
// its metric series, which no late event of its watches writes again.
func (c *Watcher) removeCluster(name string) {
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

// startCluster runs the watches of cl: per way of export its Services
// and their slices, and the local cluster's mirrors and derived Services.
func (c *Watcher) startCluster(cl *cluster) {
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

// cluster returns the generation of cluster name that serves it, or nil.
func (c *Watcher) cluster(name string) *cluster {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.clusters[name]
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

// newCluster makes the stores of one generation of a cluster's watches:
// its exported Services (one store per way of exporting), its federated
// members, their EndpointSlices, and, in the local cluster, the mirror
// Services. Only what can be answered is sent: each watch selects on the
// API server (remote.Way), and a Service that stopped matching (a watch
// that does not filter) is dropped as it comes.
func (c *Watcher) newCluster(name string, client kubernetes.Interface) *cluster {
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

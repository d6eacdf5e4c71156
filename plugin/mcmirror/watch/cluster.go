package watch

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A cluster's watches: each generation of them (a kubeconfig that changes
// makes a new one, which takes over once it has synced: remote.Links), its
// stores, and how it starts.

// cluster is one generation of the watches of one cluster; it is a
// remote.Generation.
type cluster struct {
	w      *Watcher
	name   string
	local  bool
	client kubernetes.Interface
	// namespaces are the link's: only what they hold is watched.
	namespaces link.Namespaces

	services    *objectStore // Services the export selector exports
	mcsServices *objectStore // Services a ServiceExport exports (the stamp)
	fedServices *objectStore // federated members (federated.go)
	// slices are the EndpointSlices of the Services of each of
	// serviceStores, selected on the API server by the same way.
	slices  [3]*objectStore
	mirrors *objectStore // mirror Services; local cluster only
	derived *objectStore // derived Services; local cluster, with clusterset
	// mirrorSlices are the mirrors' EndpointSlices; local cluster, in
	// import mode (imported.go).
	mirrorSlices *objectStore

	// health is whether the watches work, and owns the cluster's metric
	// series while this generation serves it.
	health *linkHealth

	// started is when its watches started, for the startup timeout.
	started atomic.Pointer[time.Time]
	synced  atomic.Bool
}

const (
	objService = iota
	objSlice
	objMirror
	objMCSService
	objDerived
	objFedService
	objMirrorSlice
)

var objKinds = [...]string{"service", "endpointslice", "mirror", "mcs-service", "derived", "federated-service", "mirror-endpointslice"}

const sliceServiceIndex = "service"

// linkConsumer is the Watcher as remote.Links sees it: the links'
// generations, and which one serves.
type linkConsumer struct{ c *Watcher }

var (
	_ remote.Consumer[*cluster] = linkConsumer{}
	_ remote.Generation         = (*cluster)(nil)
)

// New makes the stores of a generation of link name, narrowed to ns.
func (lc linkConsumer) New(name string, client kubernetes.Interface, ns link.Namespaces, _ bool) *cluster {
	cl := lc.c.newCluster(name, client)
	cl.namespaces = ns
	return cl
}

// Serve gives cl the link's metric series; a generation it replaces loses
// them, and every group either exports is rebuilt.
func (lc linkConsumer) Serve(name string, cl, old *cluster, replaced bool) {
	if replaced {
		old.health.stop(false)
	}
	cl.health.own()
	if replaced {
		lc.c.enqueueAll(old)
		lc.c.enqueueAll(cl)
		log.Infof("Cluster %s: now watched with its new configuration", name)
	}
}

// Stop ends cl's health; a removed link's series go, and every group it
// exported loses its share.
func (lc linkConsumer) Stop(name string, cl *cluster, removed bool) {
	cl.health.stop(removed)
	if removed {
		lc.c.enqueueAll(cl)
		log.Infof("Stopped watching cluster %s", name)
	}
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

// Start runs the watches of cl until ctx ends: per way of export its
// Services and their slices, and the local cluster's mirrors and derived
// Services. It implements remote.Generation.
func (cl *cluster) Start(ctx context.Context) {
	now := time.Now()
	cl.started.Store(&now)
	c := cl.w
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
	if cl.mirrorSlices != nil {
		go c.reflector(cl, watchMirrorSlices, remote.EndpointSlices, labels.MirrorSelector, cl.mirrorSlices).RunWithContext(quiet)
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
	if cl.mirrorSlices != nil {
		synced = append(synced, cl.mirrorSlices.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	cl.synced.Store(true)
	cl.health.setSynced()
	log.Infof("Synced with cluster %s", cl.name)
}

// HasSynced reports whether every watch of cl has listed once; it
// implements remote.Generation.
func (cl *cluster) HasSynced() bool { return cl.synced.Load() }

// waiting reports whether cl has not synced and may still hold up
// readiness: the local cluster always, a link for timeout after its
// watches started.
func (cl *cluster) waiting(timeout time.Duration) bool {
	if cl.synced.Load() {
		return false
	}
	started := cl.started.Load()
	return cl.local || started == nil || time.Since(*started) < timeout
}

// cluster returns the generation of cluster name that serves it, or nil.
func (c *Watcher) cluster(name string) *cluster {
	if name == c.local {
		return c.localCluster
	}
	cl, _ := c.links.Get(name)
	return cl
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
	cl := &cluster{w: c, name: name, local: name == c.local, client: client}
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
		cl.slices[i] = newObjectStore(sliceTransform(c.ways[i].Slices(), object.ToSlice), isSlice,
			cache.Indexers{sliceServiceIndex: slicesByService}, c.sliceHandler(cl))
	}
	if cl.local {
		cl.mirrors = newObjectStore(mirrorTransform(c.imports), func(obj any) bool {
			m, ok := obj.(*object.Mirror)
			return ok && m.IsMirror
		}, mirrorIndexers(c.imports), c.mirrorHandler(cl))
	}
	if cl.local && c.clusterset {
		cl.derived = c.newDerivedStore(cl)
		cl.health.derived = true
	}
	if cl.local && c.imports {
		cl.mirrorSlices = c.newMirrorSliceStore(cl)
		cl.health.imported = true
	}
	for _, s := range append([]*objectStore{cl.services, cl.mcsServices, cl.fedServices, cl.mirrors, cl.derived, cl.mirrorSlices}, cl.slices[:]...) {
		if s != nil {
			s.bookmark = cl.health.contact
		}
	}
	return cl
}

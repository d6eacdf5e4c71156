package mcmirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// controller is the informer layer: it watches the local cluster and every
// linked cluster, keeps their trimmed objects, and feeds the index. Event
// handlers only compute the service group an object belongs to and queue
// it; one worker rebuilds queued groups, so two builds of a group never race
// and a burst of events for one group costs one build.
type controller struct {
	local string
	// exported selects the exported Services of every cluster; it leaves
	// out mirrors, which are never exported again.
	exported k8slabels.Selector
	// startupTimeout is how long a link that cannot sync holds up
	// readiness.
	startupTimeout time.Duration
	// sync rebuilds a group: the index's.
	sync  func(groupKey) []groupKey
	queue *workqueue.Typed[groupKey]
	// inflight is the number of groups being rebuilt, for readiness.
	inflight atomic.Int32

	mu       sync.RWMutex
	clusters map[string]*cluster
	links    []string // the linked clusters' names, sorted; replaced, never modified
	ctx      context.Context
	cancel   context.CancelFunc
	started  time.Time

	// secrets, when set, adds and removes links from link Secrets.
	secrets *link.SecretWatcher

	// triggers are the oldest unprocessed change times of queued groups,
	// for the programming latency metric.
	triggersMu sync.Mutex
	triggers   map[groupKey]trigger
}

type trigger struct {
	at      time.Time
	cluster string
}

// cluster is the watches of one cluster.
type cluster struct {
	name   string
	local  bool
	client kubernetes.Interface

	services cache.SharedIndexInformer // exported Services
	slices   cache.SharedIndexInformer // EndpointSlices
	mirrors  cache.SharedIndexInformer // mirror Services; local cluster only
	regs     []cache.ResourceEventHandlerRegistration

	started time.Time // when its informers started, for the startup timeout
	ctx     context.Context
	cancel  context.CancelFunc
	// next is the replacement being synced after a kubeconfig change;
	// guarded by controller.mu.
	next   *cluster
	synced atomic.Bool
	// failing is whether the last list or watch failed, so that an
	// unreachable cluster is logged once, not at every retry.
	failing atomic.Bool

	// metrics, resolved once.
	lastSync prometheus.Gauge
	objects  [3]prometheus.Gauge // service, endpointslice, mirror
	counts   [3]atomic.Int64     // what objects show
}

const (
	objService = iota
	objSlice
	objMirror
)

var objKinds = [...]string{"service", "endpointslice", "mirror"}

const sliceServiceIndex = "service"

func newController(local string, export k8slabels.Selector, startupTimeout time.Duration) *controller {
	notMirror, _ := k8slabels.NewRequirement(labels.MirroredService, selection.DoesNotExist, nil)
	return &controller{
		local:          local,
		exported:       export.Add(*notMirror),
		startupTimeout: startupTimeout,
		queue:          workqueue.NewTyped[groupKey](),
		clusters:       map[string]*cluster{},
		triggers:       map[groupKey]trigger{},
	}
}

// addCluster watches the cluster client talks to, from now if the
// controller runs, else from start.
func (c *controller) addCluster(name string, client kubernetes.Interface) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.clusters[name]; ok {
		return fmt.Errorf("cluster %q is already watched", name)
	}
	cl, err := c.newCluster(name, client)
	if err != nil {
		return err
	}
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
// kubeconfig changed). The old watches keep serving until the new ones have
// synced, so the change costs no gap; if the new ones never sync, the last
// known state stays, as for any link that breaks.
func (c *controller) replaceCluster(name string, client kubernetes.Interface) error {
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
	next, err := c.newCluster(name, client)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if old.next != nil {
		old.next.cancel() // an earlier replacement that had not synced
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
		c.mu.Unlock()
		old.cancel()
		c.enqueueAll(old)
		c.enqueueAll(next)
		log.Infof("Cluster %s: now watched with its new configuration", name)
	}()
	return nil
}

// enqueueAll queues every group a cluster exports.
func (c *controller) enqueueAll(cl *cluster) {
	for _, obj := range cl.services.GetStore().List() {
		if s, ok := obj.(*Service); ok {
			c.enqueue(groupKey{s.Namespace, s.Name})
		}
	}
}

// removeCluster stops watching a linked cluster and drops its names.
func (c *controller) removeCluster(name string) {
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

	if cl.cancel != nil {
		cl.cancel()
	}
	if next != nil {
		next.cancel()
	}
	// Every group the cluster exported loses its share.
	c.enqueueAll(cl)
	linkSynced.DeleteLabelValues(name)
	linkLastSync.DeleteLabelValues(name)
	linkWatchErrors.DeleteLabelValues(name)
	droppedAddresses.DeleteLabelValues(name)
	programmingLatency.DeleteLabelValues(name)
	for _, k := range objKinds {
		linkObjects.DeleteLabelValues(name, k)
	}
	log.Infof("Stopped watching cluster %s", name)
}

// start starts every watch and the worker; it does not wait for them.
func (c *controller) start() {
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
func (c *controller) stop() {
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.queue.ShutDown()
}

func (c *controller) startCluster(cl *cluster) {
	ctx, cancel := context.WithCancel(c.ctx)
	cl.ctx, cl.cancel = ctx, cancel
	cl.started = time.Now()
	go cl.services.Run(ctx.Done())
	go cl.slices.Run(ctx.Done())
	if cl.mirrors != nil {
		go cl.mirrors.Run(ctx.Done())
	}
	go cl.watchSync(ctx)
}

// watchSync records when the cluster has synced, then keeps the last-sync
// metric fresh from the watch bookmarks while nothing changes.
func (cl *cluster) watchSync(ctx context.Context) {
	synced := make([]cache.InformerSynced, len(cl.regs))
	for i, r := range cl.regs {
		synced[i] = r.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	cl.synced.Store(true)
	linkSynced.WithLabelValues(cl.name).Set(1)
	cl.lastSync.SetToCurrentTime()
	log.Infof("Synced with cluster %s", cl.name)

	last := ""
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			v := cl.services.LastSyncResourceVersion() + "/" + cl.slices.LastSyncResourceVersion()
			if v != last {
				last = v
				cl.lastSync.SetToCurrentTime()
			}
		}
	}
}

// work rebuilds queued groups until the queue shuts down.
func (c *controller) work() {
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

func (c *controller) enqueue(k groupKey) { c.queue.Add(k) }

// noteTrigger remembers the oldest change not yet in the index of group k.
func (c *controller) noteTrigger(k groupKey, cluster string, at time.Time) {
	c.triggersMu.Lock()
	defer c.triggersMu.Unlock()
	if t, ok := c.triggers[k]; !ok || at.Before(t.at) {
		c.triggers[k] = trigger{at: at, cluster: cluster}
	}
}

func (c *controller) observe(k groupKey) {
	c.triggersMu.Lock()
	t, ok := c.triggers[k]
	delete(c.triggers, k)
	c.triggersMu.Unlock()
	if ok {
		programmingLatency.WithLabelValues(t.cluster).Observe(time.Since(t.at).Seconds())
	}
}

// HasSynced reports whether the index is ready to answer: the local cluster
// and the link Secrets have synced, every link has synced or has had
// startupTimeout to do so, and the index has caught up with what they said.
// A link that cannot be reached does not hold DNS up for longer than that.
func (c *controller) HasSynced() bool {
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
	return c.queue.Len() == 0 && c.inflight.Load() == 0
}

// unsynced returns the clusters that have not synced, for the log.
func (c *controller) unsynced() []string {
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
func (c *controller) Links() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.links
}

func (c *controller) cluster(name string) *cluster {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.clusters[name]
}

// Service implements source.
func (c *controller) Service(cluster, ns, name string) *Service {
	cl := c.cluster(cluster)
	if cl == nil {
		return nil
	}
	obj, ok, _ := cl.services.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	if s, _ := obj.(*Service); s != nil && s.Exported {
		return s
	}
	return nil
}

// Slices implements source.
func (c *controller) Slices(cluster, ns, name string) []*Slice {
	cl := c.cluster(cluster)
	if cl == nil {
		return nil
	}
	objs, err := cl.slices.GetIndexer().ByIndex(sliceServiceIndex, ns+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*Slice, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*Slice); ok {
			out = append(out, s)
		}
	}
	return out
}

// Mirror implements source.
func (c *controller) Mirror(ns, name string) *Mirror {
	cl := c.cluster(c.local)
	if cl == nil || cl.mirrors == nil {
		return nil
	}
	obj, ok, _ := cl.mirrors.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	if m, _ := obj.(*Mirror); m != nil && m.IsMirror {
		return m
	}
	return nil
}

// newCluster makes the informers of one cluster: its exported Services and
// their EndpointSlices, and, in the local cluster, the mirror Services.
func (c *controller) newCluster(name string, client kubernetes.Interface) (*cluster, error) {
	cl := &cluster{
		name:     name,
		local:    name == c.local,
		client:   client,
		lastSync: linkLastSync.WithLabelValues(name),
	}
	for i, k := range objKinds {
		cl.objects[i] = linkObjects.WithLabelValues(name, k)
	}
	linkSynced.WithLabelValues(name).Set(0)

	cl.services = newInformer(client, cl, &corev1.Service{}, c.exported.String(), serviceTransform(c.exported), nil)
	// EndpointSlices can only be selected by their Service's name, not by
	// whether it is exported: the handler filters, and a Service that
	// becomes exported finds its slices in the store.
	hasService, _ := k8slabels.NewRequirement(labels.ServiceName, selection.Exists, nil)
	cl.slices = newInformer(client, cl, &discovery.EndpointSlice{}, k8slabels.NewSelector().Add(*hasService).String(), toSlice,
		cache.Indexers{sliceServiceIndex: func(obj any) ([]string, error) {
			s, ok := obj.(*Slice)
			if !ok || s.Service == "" {
				return nil, nil
			}
			return []string{s.Namespace + "/" + s.Service}, nil
		}})
	if cl.local {
		cl.mirrors = newInformer(client, cl, &corev1.Service{}, labels.MirrorSelector, toMirror, nil)
	}

	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		cl.regs = append(cl.regs, reg)
		return nil
	}
	if err := add(cl.services, c.serviceHandler(cl)); err != nil {
		return nil, err
	}
	if err := add(cl.slices, c.sliceHandler(cl)); err != nil {
		return nil, err
	}
	if cl.mirrors != nil {
		if err := add(cl.mirrors, c.mirrorHandler(cl)); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

func newInformer(client kubernetes.Interface, cl *cluster, obj runtime.Object, selector string, transform cache.TransformFunc, indexers cache.Indexers) cache.SharedIndexInformer {
	var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
	var watchf func(context.Context, metav1.ListOptions) (watch.Interface, error)
	switch obj.(type) {
	case *corev1.Service:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services(corev1.NamespaceAll).List(ctx, o)
		}
		watchf = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Services(corev1.NamespaceAll).Watch(ctx, o)
		}
	case *discovery.EndpointSlice:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).List(ctx, o)
		}
		watchf = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).Watch(ctx, o)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			l, err := list(ctx, o)
			cl.apiResult(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			w, err := watchf(ctx, o)
			cl.apiResult(ctx, err)
			return w, err
		},
	}
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), obj, 0, indexers)
	// Neither fails before Run.
	_ = inf.SetTransform(transform)
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if !errors.Is(err, io.EOF) { // a watch the server closed is routine
			log.Debugf("Cluster %s: watching %T: %v", cl.name, obj, err)
		}
	})
	return inf
}

// apiResult counts a failed list or watch (the reflector retries some,
// such as a refused connection, without telling its error handler) and
// logs when a cluster becomes unreachable and reachable again, not at
// every retry.
func (cl *cluster) apiResult(ctx context.Context, err error) {
	if err == nil {
		if cl.failing.CompareAndSwap(true, false) {
			log.Infof("Cluster %s is reachable again", cl.name)
		}
		return
	}
	if ctx.Err() != nil {
		return // stopping
	}
	linkWatchErrors.WithLabelValues(cl.name).Inc()
	if cl.failing.CompareAndSwap(false, true) {
		log.Warningf("Cluster %s: %v; serving its last known state", cl.name, err)
	}
}

// handler adapts typed add/update/delete functions, unwrapping tombstones.
func handler[T any](add func(T, bool), update func(T, T), del func(T)) cache.ResourceEventHandlerDetailedFuncs {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if t, ok := obj.(T); ok {
				add(t, initial)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(T)
			n, ok2 := obj.(T)
			if ok1 && ok2 {
				update(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if t, ok := obj.(T); ok {
				del(t)
			}
		},
	}
}

func (c *controller) serviceHandler(cl *cluster) cache.ResourceEventHandler {
	return handler(
		func(s *Service, _ bool) {
			cl.touched(objService, 1)
			c.enqueue(groupKey{s.Namespace, s.Name})
		},
		func(_, s *Service) {
			cl.touched(objService, 0)
			c.enqueue(groupKey{s.Namespace, s.Name})
		},
		func(s *Service) {
			cl.touched(objService, -1)
			c.enqueue(groupKey{s.Namespace, s.Name})
		},
	)
}

func (c *controller) sliceHandler(cl *cluster) cache.ResourceEventHandler {
	// Only slices of exported Services matter; the others are kept (see
	// newCluster) but cost no rebuild.
	exported := func(s *Slice) bool {
		obj, ok, _ := cl.services.GetStore().GetByKey(s.Namespace + "/" + s.Service)
		svc, _ := obj.(*Service)
		return ok && svc != nil && svc.Exported
	}
	return handler(
		func(s *Slice, initial bool) {
			cl.touched(objSlice, 1)
			if exported(s) {
				k := groupKey{s.Namespace, s.Service}
				if !initial && !s.TriggerTime.IsZero() {
					c.noteTrigger(k, cl.name, s.TriggerTime)
				}
				c.enqueue(k)
			}
		},
		func(old, s *Slice) {
			cl.touched(objSlice, 0)
			if old.Service != s.Service && exported(old) {
				c.enqueue(groupKey{old.Namespace, old.Service})
			}
			if exported(s) {
				k := groupKey{s.Namespace, s.Service}
				if !s.TriggerTime.IsZero() && !s.TriggerTime.Equal(old.TriggerTime) {
					c.noteTrigger(k, cl.name, s.TriggerTime)
				}
				c.enqueue(k)
			}
		},
		func(s *Slice) {
			cl.touched(objSlice, -1)
			if exported(s) {
				c.enqueue(groupKey{s.Namespace, s.Service})
			}
		},
	)
}

func (c *controller) mirrorHandler(cl *cluster) cache.ResourceEventHandler {
	enqueue := func(m *Mirror) {
		if k, ok := mirrorGroup(m); ok {
			c.enqueue(k)
		}
	}
	return handler(
		func(m *Mirror, _ bool) { cl.touched(objMirror, 1); enqueue(m) },
		func(old, m *Mirror) { cl.touched(objMirror, 0); enqueue(old); enqueue(m) },
		func(m *Mirror) { cl.touched(objMirror, -1); enqueue(m) },
	)
}

// mirrorGroup returns the group a mirror Service serves: <svc> of
// <svc>-<cluster>, for a Service mirror and for the per-pod mirrors of a
// headless one.
func mirrorGroup(m *Mirror) (groupKey, bool) {
	if m.Cluster == "" {
		return groupKey{}, false
	}
	base := m.Name
	if m.HeadlessOf != "" {
		base = m.HeadlessOf
	}
	svc, ok := labels.SplitMirrorName(base, m.Cluster)
	if !ok {
		return groupKey{}, false
	}
	return groupKey{m.Namespace, svc}, true
}

// touched records an event from the cluster: delta is the change in the
// number of objects of kind. The gauge is set from the cluster's own count,
// so a cluster watched anew (a replaced link, a reload) starts from zero.
func (cl *cluster) touched(kind int, delta int64) {
	if delta != 0 {
		cl.objects[kind].Set(float64(cl.counts[kind].Add(delta)))
	}
	if cl.synced.Load() {
		cl.lastSync.SetToCurrentTime()
	}
}

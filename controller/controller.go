// Package controller is mcmirror's mirror controller: for every Service
// exported by a linked cluster it keeps the local mirror objects that the
// multi-cluster DNS names resolve to, named and labelled as Linkerd's
// service mirror names them (internal/labels).
//
// The shape is Kubernetes' endpointslicemirroring controller's: informers on
// every linked cluster (exported Services and their EndpointSlices) and on the
// local one (Services, the controller's own EndpointSlices, Namespaces, and
// the gateway egress Service's EndpointSlices: egress.go); event handlers that only enqueue a key, cluster/namespace/service; and one
// sync per key that reads the listers, computes the desired objects, and
// writes only the difference. README.md describes what is created.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

const (
	// maxRetries is the number of times a key is retried before it is
	// dropped (until its next informer event or resync). With the rate
	// limiter below (100ms*2^(retries-1), at most 60s) the delays between
	// attempts are 0.1s, 0.2s, 0.4s, 0.8s, 1.6s, 3.2s, 6.4s, 12.8s, 25.6s,
	// 51.2s, then 60s four times: about seven minutes in all.
	maxRetries = 15

	baseBackoff = 100 * time.Millisecond
	maxBackoff  = 60 * time.Second

	// resyncPeriod re-lists every informer, so that a key dropped after
	// maxRetries is tried again eventually.
	resyncPeriod = 10 * time.Minute

	// Index names of the local informers.
	byKey     = "mcmirror-key"
	byCluster = "mcmirror-cluster"
	// byService indexes remote EndpointSlices by namespace/service.
	byService = "service"
)

// Options configures a Controller.
type Options struct {
	// Cluster is the local cluster's name: links may not take it.
	Cluster string
	// Client is the local cluster's client; mirrors are written with it.
	Client kubernetes.Interface
	// ExportSelector selects the exported Services of linked clusters
	// (default: labels.DefaultExportSelector, as the DNS plugin).
	ExportSelector k8slabels.Selector
	// EgressAddress is a fixed local gateway egress address the mirrors'
	// EndpointSlices point at. The API server refuses loopback addresses.
	// Give it or EgressService, not both.
	EgressAddress netip.Addr
	// EgressService is the local Service (the gateway's headless egress
	// Service) whose ready endpoint addresses the mirrors' EndpointSlices
	// point at, all of them, followed as they change (egress.go).
	EgressService types.NamespacedName
	// EgressPorts is the range egress ports are allocated from.
	EgressPorts PortRange
	// CreateNamespaces allows creating the namespace of an exported
	// Service when the local cluster lacks it.
	CreateNamespaces bool
	// PodGrace is how long a per-pod mirror outlives its remote endpoint,
	// so that a pod briefly absent during a rolling update keeps its
	// mirror and ClusterIP (Linkerd #12499). Zero deletes at once.
	PodGrace time.Duration
	// HeadlessGrace is how long a headless mirror stays headless while
	// its remote endpoints have no hostname (all pods gone in a rollout,
	// a scale to zero), before it becomes a ClusterIP mirror (a
	// StatefulSet replaced by a Deployment). Zero switches at once.
	HeadlessGrace time.Duration
	// LinkRemovalGrace is how long the mirrors of a removed link are kept
	// before they are swept, so that a link Secret being rewritten (a
	// Remove directly followed by an Add) does not flap every mirror.
	LinkRemovalGrace time.Duration
	// Workers is the number of concurrent syncs (default 4).
	Workers int
	// FlatEndpoints gives flat-mode mirrors EndpointSlices that copy the
	// remote endpoints (slices.go, flatSlices): the objects DNS in import
	// mode answers flat-mode names from. Off, a flat-mode mirror has no
	// EndpointSlice.
	FlatEndpoints bool
	// LinksSynced reports whether every link that exists at start-up has
	// been added (a link.SecretWatcher's HasSynced). Nil: at once.
	LinksSynced func() bool
	// Recorder records Events; nil records them through Client.
	Recorder record.EventRecorder
	// MCS is the local cluster's client of the Multi-Cluster Services
	// API. When set, a ServiceExport exports its Service, and every
	// Service the clusterset exports gets its ServiceImport here
	// (mcsapi.go); nil leaves the API alone (its CRDs are not installed).
	MCS mcsclient.Interface
	// ServiceExportMode is the mode, labels.ModeGateway or labels.ModeFlat, of a
	// ServiceExport without the mcmirror.dev/mode annotation (default
	// gateway).
	ServiceExportMode string
	// EndpointPolicy is which endpoints of a linked cluster's flat-mode
	// export an import carries (importscreen.go); the zero value believes
	// only Pods of the Service's namespace listed by the EndpointSlice
	// controller.
	EndpointPolicy endpointpolicy.Policy
	// MaxImportEndpoints bounds the endpoints one import carries, all
	// its sources together (default defaultMaxImportEndpoints).
	MaxImportEndpoints int
	// LinkStartupTimeout bounds how long an import that a link which has
	// not synced takes part in waits for it (importheld.go); zero: it
	// goes on at once, keeping that link's part as it was.
	LinkStartupTimeout time.Duration
}

// defaultMaxImportEndpoints is Kubernetes' scalability threshold for the
// backends of one Service.
const defaultMaxImportEndpoints = 5000

// Controller keeps the local mirrors of the exported Services of linked
// clusters.
type Controller struct {
	opts   Options
	client kubernetes.Interface
	// recorder records the Events whose reasons are in events.go.
	recorder record.EventRecorder
	// broadcaster is ours to shut down when we made it.
	broadcaster record.EventBroadcaster
	// queue holds keys cluster/namespace/service of exported Services.
	queue workqueue.TypedRateLimitingInterface[string]
	// ports allocates egress ports; rebuilt from the mirrors at start-up.
	ports *portAllocator

	// services sees every local Service: the controller's own mirrors
	// (indexed by key and cluster) and the foreign ones whose names it
	// may want.
	services cache.SharedIndexInformer
	// slices sees the controller's own EndpointSlices only.
	slices cache.SharedIndexInformer
	// namespaces tells whether a mirror's namespace exists.
	namespaces cache.SharedIndexInformer
	// egressSlices sees the EndpointSlices of Options.EgressService; nil
	// with a fixed EgressAddress.
	egressSlices cache.SharedIndexInformer
	// mcs is the Multi-Cluster Services API side (mcsapi.go); nil
	// without Options.MCS.
	mcs *mcsAPI
	// localSynced report whether the local informers' handlers, not only
	// their stores, have seen the first lists.
	localSynced []cache.InformerSynced

	// egressMu guards the egress addresses in use: what every egress
	// EndpointSlice lists (egress.go).
	egressMu    sync.Mutex
	egressAddrs []netip.Addr
	// egressEmpty is set while the egress Service has no ready address.
	egressEmpty bool
	// egressStarted is set once the egress addresses have been read after
	// the informers synced; informer events before are ignored.
	egressStarted atomic.Bool

	// running is set once Run has started the local informers: links
	// added before wait for it.
	running atomic.Bool
	// now is time.Now, replaced in tests.
	now func() time.Time

	// links are the linked clusters (links.go).
	links *remote.Links[*remoteCluster]

	mu sync.Mutex
	// ways are the ways of export a link is watched for: the export
	// selector's, and the ServiceExport stamp's.
	ways []remote.Way
	// removed is when each link was removed, for LinkRemovalGrace.
	removed map[string]time.Time
	// missing is, by key, when the remote endpoint of each per-pod
	// mirror (by name) was first seen missing, for PodGrace.
	missing map[string]map[string]time.Time
	// hostless is, by key, since when a headless mirror's remote
	// endpoints have had no hostname, for HeadlessGrace.
	hostless map[string]time.Time
	// wanted maps a name (namespace/name) that a Service not of the key
	// holds (a foreign one, or another key's mirror) to the keys that
	// want it, so that its deletion syncs them.
	wanted map[string]map[string]bool
	// refused are the clusters named by link Secrets that were refused
	// while no link to them runs: their mirrors are kept (refused.go).
	refused map[string]refusedLink
	// maxEndpoints is maxEndpointsPerSlice; tests make it smaller.
	maxEndpoints int
	// starved are keys that could not get every egress port they need:
	// synced again when a port is released.
	starved map[string]bool
	// status is what each key's last sync left, for the gauges.
	status map[string]keyStatus
	// startedAt is when Run started the links, for the wait for link
	// Secrets not read yet (importheld.go).
	startedAt time.Time
	// keptNoted are, by cluster, the imports told that they keep that
	// cluster's part while its link has not synced (noteKept).
	keptNoted map[string]map[string]bool
	// importRefused is what each import (namespace/name) leaves out of
	// its sources' endpoints, for the import_endpoints_refused gauge and
	// the Events told when it changes (importrefused.go).
	importRefused map[string]refusals
}

// keyStatus is the result of one key's last sync.
type keyStatus struct {
	cluster  string
	services int
	pods     int
	reason   string // why it is not (entirely) mirrored, an Event reason
}

// remoteCluster is one linked cluster's informers.
type remoteCluster struct {
	name   string
	client kubernetes.Interface
	// namespaces are the namespaces of the link: only what they hold is
	// listed and watched (remote.Requests).
	namespaces link.Namespaces
	// ways are the informers of each way of export (linkwatch.go).
	ways []*linkWay
	// health is whether the link's lists and watches are answered, for
	// link_up, link_errors_total and the log.
	health *remote.Health
	// synced is set when every informer's handlers have seen the first
	// lists: only then may a sync delete a mirror because its remote
	// Service is missing. Every key of the cluster is enqueued right
	// after, and enqueued is set.
	synced   atomic.Bool
	enqueued atomic.Bool
	// serving is set once the informers serve the link, in place of
	// those of an earlier kubeconfig or first: from then on its health
	// writes link_up.
	serving atomic.Bool
	// startedAt is when the informers started, which begins the start-up
	// wait of the imports it takes part in; guarded by Controller.mu.
	startedAt time.Time
	// c is the controller the link serves.
	c *Controller
	// handlersSynced report whether the handlers have seen the first
	// lists, not only the informers' stores.
	handlersSynced []cache.InformerSynced
}

// New returns a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil {
		return nil, errors.New("controller: no local client")
	}
	if err := labels.ValidateClusterName(opts.Cluster); err != nil {
		return nil, fmt.Errorf("controller: local cluster: %w", err)
	}
	if err := validateEgressOptions(opts); err != nil {
		return nil, err
	}
	// The zero range is unset (and contains every port); a range from port
	// 0 is none labels.ParsePortRange makes.
	if opts.EgressPorts.IsZero() || opts.EgressPorts.First == 0 {
		return nil, errors.New("controller: no egress port range")
	}
	if opts.ExportSelector == nil {
		sel, err := k8slabels.Parse(labels.DefaultExportSelector)
		if err != nil {
			return nil, err
		}
		opts.ExportSelector = sel
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxImportEndpoints <= 0 {
		opts.MaxImportEndpoints = defaultMaxImportEndpoints
	}
	switch opts.ServiceExportMode {
	case "":
		opts.ServiceExportMode = labels.ModeGateway
	case labels.ModeGateway, labels.ModeFlat:
	default:
		return nil, fmt.Errorf("controller: ServiceExport mode %q: want %s or %s", opts.ServiceExportMode, labels.ModeGateway, labels.ModeFlat)
	}
	c := &Controller{
		opts:   opts,
		client: opts.Client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](baseBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcmirror-controller"}),
		ports:    newPortAllocator(opts.EgressPorts),
		now:      time.Now,
		removed:  map[string]time.Time{},
		missing:  map[string]map[string]time.Time{},
		hostless: map[string]time.Time{},
		wanted:   map[string]map[string]bool{},
		refused:  map[string]refusedLink{},
		starved:  map[string]bool{},
		status:   map[string]keyStatus{},
		ways:     []remote.Way{remote.Selected(opts.ExportSelector), remote.Stamped},
	}
	c.links = remote.NewLinks(opts.Cluster, linkConsumer{c})
	c.keptNoted, c.importRefused = map[string]map[string]bool{}, map[string]refusals{}
	c.recorder = opts.Recorder
	if c.recorder == nil {
		c.broadcaster = record.NewBroadcaster()
		c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "mcmirror-controller"})
	}

	ownedIndexers := cache.Indexers{byKey: indexByKey, byCluster: indexByCluster}
	c.services = coreinformers.NewServiceInformer(opts.Client, metav1.NamespaceAll, resyncPeriod, ownedIndexers)
	// The controller's slices also by their Service (namespace/name): a
	// mirror's, whose endpoints an import copies, and a derived Service's.
	c.slices = discoveryinformers.NewFilteredEndpointSliceInformer(opts.Client, metav1.NamespaceAll, resyncPeriod,
		cache.Indexers{byKey: indexByKey, byCluster: indexByCluster, byService: indexSliceByService},
		func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelManagedBy + "=" + labels.EndpointSliceManagedBy
		})
	c.namespaces = coreinformers.NewNamespaceInformer(opts.Client, resyncPeriod, cache.Indexers{})
	// The Services keep the controller's own managed fields: the stamp
	// it owns is what an unexport takes away (exportapply.go).
	_ = c.services.SetTransform(trimKeeping(ExportFieldManager))
	for _, inf := range []cache.SharedIndexInformer{c.slices, c.namespaces} {
		_ = inf.SetTransform(trim)
	}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		cache.ResourceEventHandlerFuncs
	}{
		{c.services, remote.OnAny(c.onLocalService)},
		{c.slices, remote.OnAny(c.onOwned)},
		{c.namespaces, cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onNamespace,
			UpdateFunc: func(_, obj any) { c.onNamespace(obj) },
		}},
	} {
		reg, err := h.inf.AddEventHandler(h.ResourceEventHandlerFuncs)
		if err != nil {
			return nil, err
		}
		c.localSynced = append(c.localSynced, reg.HasSynced)
	}
	if err := c.newEgressInformer(); err != nil {
		return nil, err
	}
	if err := c.newMCSAPI(); err != nil {
		return nil, err
	}
	return c, nil
}

// Run runs the controller until ctx is done: it waits for the local
// informers, reads the egress ports back from the existing mirrors, enqueues
// every existing mirror (the start-up sweep: a sync deletes orphans), and
// runs the workers. Linked clusters are not waited for: the keys of a
// cluster that has not synced yet are left alone until it has (see sync),
// so one unreachable cluster delays nobody else.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if c.broadcaster != nil {
		c.broadcaster.StartStructuredLogging(3)
		c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
		defer c.broadcaster.Shutdown()
	}

	for _, inf := range c.localInformers() {
		go inf.Run(ctx.Done())
	}
	if !cache.WaitForNamedCacheSync("mcmirror-controller", ctx.Done(), c.localSynced...) {
		return ctx.Err()
	}
	c.restorePorts(logger)
	c.initEgress()

	c.mu.Lock()
	c.startedAt = c.now()
	c.mu.Unlock()
	c.running.Store(true)
	c.links.Start(ctx)

	n := c.sweep()
	logger.Info("Start-up sweep", "keys", n, "egressPorts", c.ports.Len(), "egressAddresses", c.egressAddresses())

	var wg sync.WaitGroup
	if c.mcs != nil {
		wg.Go(func() { c.runMCS(ctx, 2) })
	}
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNextWorkItem(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// linkSourcesSynced reports whether every link that existed at start-up
// has been added: until then an unknown cluster may be one whose link
// Secret has not been read yet, and its mirrors are not orphans.
func (c *Controller) linkSourcesSynced() bool {
	return c.opts.LinksSynced == nil || c.opts.LinksSynced()
}

// sweep enqueues every key the controller has objects for, and every
// exported Service of the synced links: a sync deletes what is no longer
// wanted (orphans of removed links and unexported Services included).
func (c *Controller) sweep() int {
	keys := map[string]bool{}
	for _, k := range c.ownedKeys() {
		keys[k] = true
	}
	for _, r := range c.links.Serving() {
		if r.synced.Load() {
			for _, k := range r.exportedKeys() {
				keys[makeKey(r.name, k.Namespace, k.Name)] = true
			}
		}
	}
	for k := range keys {
		c.queue.Add(k)
	}
	return len(keys)
}

// restorePorts claims, before any sync, the egress ports recorded on the
// existing mirrors, so that they survive a restart and no new mirror takes
// one of them.
func (c *Controller) restorePorts(logger klog.Logger) {
	for _, obj := range c.services.GetIndexer().List() {
		s, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		key, owned := ownedKey(s)
		if !owned {
			continue
		}
		for pk, p := range labels.ParseEgressPorts(s.Annotations[labels.EgressPorts]) {
			owner := portOwner(s.Namespace, s.Name, pk)
			if !c.ports.Claim(key, owner, p) {
				logger.Info("Egress port recorded on a mirror is out of range or taken; it will be reallocated", "service", klog.KObj(s), "port", pk, "egressPort", p)
			}
		}
	}
}

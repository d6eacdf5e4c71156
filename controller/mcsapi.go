package controller

import (
	"context"
	"errors"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions/apis/v1beta1"
)

// mcsAPI is the Multi-Cluster Services API side of the controller: the
// informers it needs beyond the mirrors' and a queue of namespace/name
// keys, apart from the mirror keys (cluster/namespace/name). One sync of a
// key does both sides: the export of the local Service
// (exportplan.go, exportapply.go) and the import of the Service as the
// clusterset exports it (importplan.go, importapply.go).
type mcsAPI struct {
	client mcsclient.Interface
	// exports are the local ServiceExports.
	exports cache.SharedIndexInformer
	// imports are the local ServiceImports.
	imports cache.SharedIndexInformer
	// exportSlices are the local EndpointSlices of locally exported
	// Services, by the export selector and by the stamp: the EndpointSlice
	// controller copies a Service's labels onto its slices.
	exportSlices []cache.SharedIndexInformer
	queue        workqueue.TypedRateLimitingInterface[string]
}

// informers are the informers of the MCS side, for Run to start.
func (m *mcsAPI) informers() []cache.SharedIndexInformer {
	return append([]cache.SharedIndexInformer{m.exports, m.imports}, m.exportSlices...)
}

// newMCSAPI makes the MCS side when Options.MCS is set.
func (c *Controller) newMCSAPI() error {
	if c.opts.MCS == nil {
		return nil
	}
	m := &mcsAPI{
		client:  c.opts.MCS,
		exports: mcsinformers.NewServiceExportInformer(c.opts.MCS, metav1.NamespaceAll, resyncPeriod, cache.Indexers{}),
		imports: mcsinformers.NewServiceImportInformer(c.opts.MCS, metav1.NamespaceAll, resyncPeriod, cache.Indexers{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](baseBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcmirror-mcs"}),
	}
	for _, sel := range []string{c.opts.ExportSelector.String(), labels.ServiceExportSelector} {
		m.exportSlices = append(m.exportSlices, discoveryinformers.NewFilteredEndpointSliceInformer(c.client, metav1.NamespaceAll, resyncPeriod,
			cache.Indexers{byService: indexSliceByService}, func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	}
	enqueue := func(obj any) {
		if o, ok := metaOf(obj); ok {
			m.queue.Add(o.GetNamespace() + "/" + o.GetName())
		}
	}
	enqueueSlice := func(obj any) {
		if o, ok := metaOf(obj); ok {
			if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
				m.queue.Add(o.GetNamespace() + "/" + svc)
			}
		}
	}
	for _, h := range []struct {
		inf       cache.SharedIndexInformer
		fn        func(any)
		transform cache.TransformFunc
	}{
		{m.exports, enqueue, trim},
		// The ServiceImports keep what the controller applied on them: the
		// exported labels and annotations it owns (importmeta.go).
		{m.imports, enqueue, trimKeeping(ImportFieldManager)},
		{m.exportSlices[0], enqueueSlice, trim}, {m.exportSlices[1], enqueueSlice, trim},
	} {
		_ = h.inf.SetTransform(h.transform)
		reg, err := h.inf.AddEventHandler(remote.OnAny(h.fn))
		if err != nil {
			return err
		}
		c.localSynced = append(c.localSynced, reg.HasSynced)
	}
	c.mcs = m
	return nil
}

// mcsChanged enqueues namespace/name for the MCS side.
func (c *Controller) mcsChanged(ns, name string) {
	if c.mcs != nil {
		c.mcs.queue.Add(ns + "/" + name)
	}
}

// localServiceChanged enqueues what a change to a local Service may
// concern: its own export and import, or, for a derived Service, the
// import it stands for.
func (c *Controller) localServiceChanged(svc metav1.Object) {
	if c.mcs == nil {
		return
	}
	l := svc.GetLabels()
	if name := l[labels.ServiceImport]; name != "" && l[labels.ManagedBy] == labels.ManagedByValue {
		c.mcsChanged(svc.GetNamespace(), name)
		return
	}
	if l[labels.MirroredService] != "" {
		return
	}
	key := svc.GetNamespace() + "/" + svc.GetName()
	_, exported, _ := c.mcs.exports.GetIndexer().GetByKey(key)
	_, imported, _ := c.mcs.imports.GetIndexer().GetByKey(key)
	// A stamp, or part of one, is looked at with or without a
	// ServiceExport: one the controller did not write is removed.
	a := svc.GetAnnotations()
	stamped := l[labels.ServiceExportMode] != "" || a[labels.ServiceExportCreated] != "" || a[labels.ServiceExportMetadata] != ""
	if exported || imported || stamped || c.opts.ExportSelector.Matches(k8slabels.Set(l)) {
		c.mcs.queue.Add(key)
	}
}

// ownedSliceChanged enqueues the import that one of the controller's own
// EndpointSlices belongs to: a derived Service's, or a mirror's, whose
// endpoints the import copies.
func (c *Controller) ownedSliceChanged(m metav1.Object) {
	l := m.GetLabels()
	switch {
	case l[mcsv1beta1.LabelServiceName] != "":
		c.mcsChanged(m.GetNamespace(), l[mcsv1beta1.LabelServiceName])
	case l[labels.RemoteService] != "":
		c.mcsChanged(m.GetNamespace(), l[labels.RemoteService])
	}
}

// enqueueMCS enqueues every key of the MCS side: a link came, synced or
// went, so exports may conflict otherwise and imports have other sources.
func (c *Controller) enqueueMCS() {
	if c.mcs == nil {
		return
	}
	for _, inf := range []cache.SharedIndexInformer{c.mcs.exports, c.mcs.imports} {
		for _, k := range inf.GetIndexer().ListKeys() {
			c.mcs.queue.Add(k)
		}
	}
	for _, obj := range c.services.GetIndexer().List() {
		if s, ok := obj.(*corev1.Service); ok {
			c.localServiceChanged(s)
		}
	}
	for _, r := range c.links.Serving() {
		for _, k := range r.exportedKeys() {
			c.mcs.queue.Add(k.Namespace + "/" + k.Name)
		}
	}
}

// runMCS runs the MCS side's workers until ctx is done.
func (c *Controller) runMCS(ctx context.Context, workers int) {
	m := c.mcs
	defer m.queue.ShutDown()
	c.enqueueMCS()
	for range workers {
		go func() {
			for c.processNextMCS(ctx) {
			}
		}()
	}
	<-ctx.Done()
}

func (c *Controller) processNextMCS(ctx context.Context) bool {
	m := c.mcs
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(key)
	// Both sides read the clusterset's exports of the key: once.
	var sources []importSource
	var links linkState
	if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
		sources, links = c.importSources(ns, name)
	}
	exportErr := c.syncExport(ctx, key, sources)
	importErr := c.syncImport(ctx, key, sources, links)
	if held, ok := importErr.(importHeld); ok {
		// Not a failure: the links' sync, or the end of their wait,
		// enqueues every key; this is the latest the key is looked at.
		importErr = nil
		m.queue.AddAfter(key, held.after)
	}
	err := errors.Join(exportErr, importErr)
	switch {
	case err == nil:
		m.queue.Forget(key)
		syncsTotal.WithLabelValues("success").Inc()
	case m.queue.NumRequeues(key) < maxRetries:
		syncsTotal.WithLabelValues("error").Inc()
		klog.FromContext(ctx).V(2).Info("MCS sync failed, retrying", "key", key, "err", err)
		m.queue.AddRateLimited(key)
	default:
		syncsTotal.WithLabelValues("dropped").Inc()
		m.queue.Forget(key)
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping MCS key out of the queue", "key", key)
	}
	return true
}

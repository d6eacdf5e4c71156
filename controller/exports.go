package controller

import (
	"context"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions/apis/v1alpha1"
)

// exporter is the ServiceExport side of the controller: an informer on the
// local ServiceExports and a queue of their keys, namespace/name, apart
// from the mirror keys (cluster/namespace/name). exportplan.go says what a
// sync computes, exportapply.go what it writes.
type exporter struct {
	client   mcsclient.Interface
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// newExporter makes the exporter when Options.ServiceExports is set.
func (c *Controller) newExporter() error {
	if c.opts.ServiceExports == nil {
		return nil
	}
	e := &exporter{
		client:   c.opts.ServiceExports,
		informer: mcsinformers.NewServiceExportInformer(c.opts.ServiceExports, metav1.NamespaceAll, resyncPeriod, cache.Indexers{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](baseBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mcmirror-serviceexports"}),
	}
	_ = e.informer.SetTransform(trim)
	enqueue := func(obj any) {
		if m, ok := metaOf(obj); ok {
			e.queue.Add(m.GetNamespace() + "/" + m.GetName())
		}
	}
	reg, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return err
	}
	c.localSynced = append(c.localSynced, reg.HasSynced)
	c.exports = e
	return nil
}

// exportChanged enqueues namespace/name when an export may follow from
// a change to it: it has a ServiceExport, or its Service carries a stamp
// (which the controller may own and have to remove).
func (c *Controller) exportChanged(svc metav1.Object) {
	if c.exports == nil {
		return
	}
	key := svc.GetNamespace() + "/" + svc.GetName()
	if _, ok, _ := c.exports.informer.GetIndexer().GetByKey(key); ok || svc.GetLabels()[labels.ServiceExportMode] != "" {
		c.exports.queue.Add(key)
	}
}

// peerChanged enqueues namespace/name when a linked cluster's export of it
// changed and a local ServiceExport may now conflict with it.
func (c *Controller) peerChanged(ns, name string) {
	if c.exports == nil {
		return
	}
	key := ns + "/" + name
	if _, ok, _ := c.exports.informer.GetIndexer().GetByKey(key); ok {
		c.exports.queue.Add(key)
	}
}

// enqueueExports enqueues every ServiceExport: a link came or went, so
// their conflicts may have changed.
func (c *Controller) enqueueExports() {
	if c.exports == nil {
		return
	}
	for _, k := range c.exports.informer.GetIndexer().ListKeys() {
		c.exports.queue.Add(k)
	}
}

// runExports runs the exporter's workers until ctx is done. The local
// Services carrying a stamp are enqueued too: a ServiceExport deleted
// while the controller was down leaves one to take away.
func (c *Controller) runExports(ctx context.Context, workers int) {
	e := c.exports
	defer e.queue.ShutDown()
	c.enqueueExports()
	for _, obj := range c.services.GetIndexer().List() {
		if m, ok := obj.(*corev1.Service); ok {
			c.exportChanged(m)
		}
	}
	for range workers {
		go func() {
			for c.processNextExport(ctx) {
			}
		}()
	}
	<-ctx.Done()
}

func (c *Controller) processNextExport(ctx context.Context) bool {
	e := c.exports
	key, quit := e.queue.Get()
	if quit {
		return false
	}
	defer e.queue.Done(key)
	err := c.syncExport(ctx, key)
	switch {
	case err == nil:
		e.queue.Forget(key)
		syncsTotal.WithLabelValues("success").Inc()
	case e.queue.NumRequeues(key) < maxRetries:
		syncsTotal.WithLabelValues("error").Inc()
		klog.FromContext(ctx).V(2).Info("ServiceExport sync failed, retrying", "key", key, "err", err)
		e.queue.AddRateLimited(key)
	default:
		syncsTotal.WithLabelValues("dropped").Inc()
		e.queue.Forget(key)
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping ServiceExport key out of the queue", "key", key)
	}
	return true
}

package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Event handlers: each computes keys and enqueues them, nothing else.

func (c *Controller) onRemoteService(cluster string, obj any) {
	if m, ok := metaOf(obj); ok {
		klog.V(5).InfoS("Remote Service changed", "cluster", cluster, "service", klog.KObj(m))
		c.queue.Add(makeKey(cluster, m.GetNamespace(), m.GetName()))
		c.mcsChanged(m.GetNamespace(), m.GetName())
	}
}

func (c *Controller) onRemoteSlice(r *remoteCluster, obj any) {
	m, ok := metaOf(obj)
	if !ok {
		return
	}
	svc := m.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	// Only the slices of exported Services matter (by the selector or by
	// a ServiceExport); a Service exported after its slices is enqueued by
	// its own event.
	if !r.holds(m.GetNamespace(), svc) {
		return
	}
	c.queue.Add(makeKey(r.name, m.GetNamespace(), svc))
	c.mcsChanged(m.GetNamespace(), svc)
}

func (c *Controller) onOwned(obj any) {
	if m, ok := metaOf(obj); ok {
		if k, owned := ownedKey(m); owned {
			c.queue.Add(k)
		}
		c.ownedSliceChanged(m)
	}
}

func (c *Controller) onLocalService(obj any) {
	m, ok := metaOf(obj)
	if !ok {
		return
	}
	if k, owned := ownedKey(m); owned {
		c.queue.Add(k)
	}
	c.localServiceChanged(m)
	// The keys that want its name: a foreign Service's, or another
	// key's mirror's (the loser of a name conflict between clusters).
	c.mu.Lock()
	keys := slices.Collect(maps.Keys(c.wanted[m.GetNamespace()+"/"+m.GetName()]))
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

func (c *Controller) onNamespace(obj any) {
	m, ok := metaOf(obj)
	if !ok {
		return
	}
	for _, r := range c.links.Serving() {
		for _, k := range r.exportedKeys() {
			if k.Namespace == m.GetName() {
				c.queue.Add(makeKey(r.name, k.Namespace, k.Name))
				c.mcsChanged(k.Namespace, k.Name) // an import waits for its namespace too
			}
		}
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	klog.FromContext(ctx).V(5).Info("Syncing", "key", key)
	err := c.sync(ctx, key)
	c.handleErr(ctx, err, key)
	return true
}

// handleErr is where an error is retried or dropped: retried with backoff
// up to maxRetries times, then dropped until the key's next event.
func (c *Controller) handleErr(ctx context.Context, err error, key string) {
	logger := klog.FromContext(ctx)
	if err == nil {
		c.queue.Forget(key)
		syncsTotal.WithLabelValues("success").Inc()
		return
	}
	if n := c.queue.NumRequeues(key); n < maxRetries {
		syncsTotal.WithLabelValues("error").Inc()
		logger.V(2).Info("Sync failed, retrying", "key", key, "retries", n, "err", err)
		c.queue.AddRateLimited(key)
		return
	}
	syncsTotal.WithLabelValues("dropped").Inc()
	logger.Error(err, "Sync failed too often, dropping the key until its next change", "key", key, "retries", maxRetries)
	c.queue.Forget(key)
	utilruntime.HandleErrorWithContext(ctx, err, "Dropping mirror key out of the queue", "key", key)
	// An operator sees it on the mirror, not only in the log.
	if cluster, ns, name, kerr := splitKey(key); kerr == nil {
		c.recorder.Eventf(mirrorRef(cluster, ns, name), corev1.EventTypeWarning, ReasonWriteFailed,
			"Sync of remote Service %s failed %d times; retried at its next change or resync: %v", key, maxRetries, err)
	}
}

// Keys and indexes.

func makeKey(cluster, ns, name string) string { return cluster + "/" + ns + "/" + name }

func splitKey(key string) (cluster, ns, name string, err error) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("bad key %q", key)
	}
	return parts[0], parts[1], parts[2], nil
}

// ownedKey returns the key of an object the controller owns, and false for
// every other object. Labels alone do not make an object the controller's:
// anyone who may write Services can label one (deploy/admission-policy.yaml
// is what stops them), and an object the controller takes for its own has
// its egress ports claimed at start-up and is updated or deleted by a sync.
// So its name must also be the one the controller gives such an object: a
// Service <remote-service>-<cluster>, or <remote-hostname>-<cluster> for a
// per-pod mirror; an EndpointSlice of the controller's
// endpointslice.kubernetes.io/managed-by, for a Service of that cluster,
// named as that Service, <service>.<n> or <service>.ipv4/.ipv6. Anything
// else is foreign, and left alone.
func ownedKey(m metav1.Object) (string, bool) {
	l := m.GetLabels()
	if l[labels.ManagedBy] != labels.ManagedByValue || l[labels.ClusterName] == "" || l[labels.RemoteService] == "" {
		return "", false
	}
	switch obj := m.(type) {
	case *corev1.Service:
		if !labels.MirrorNameMatches(obj.Name, l) {
			return "", false
		}
	case *discoveryv1.EndpointSlice:
		svc := l[discoveryv1.LabelServiceName]
		if l[discoveryv1.LabelManagedBy] != labels.EndpointSliceManagedBy || !ownSliceName(obj.Name, svc) {
			return "", false
		}
		if _, ok := labels.SplitMirrorName(svc, l[labels.ClusterName]); !ok {
			return "", false
		}
	}
	return makeKey(l[labels.ClusterName], m.GetNamespace(), l[labels.RemoteService]), true
}

// ownSliceName reports whether name is one the controller gives an
// EndpointSlice of Service svc: svc itself, or svc.<something>: a headless
// mirror's further slices (svc.<n>), a dual-stack mirror's slice of its
// secondary family (svc.ipv4, svc.ipv6: familySliceName), a flat-mode
// mirror's copy of a remote slice (svc.<remote slice>: flatSliceName). No
// Service's own slice has such a name (a Service's name has no dot).
func ownSliceName(name, svc string) bool {
	n, ok := strings.CutPrefix(name, svc+".")
	return name == svc || ok && n != ""
}

func indexByKey(obj any) ([]string, error) {
	if m, ok := obj.(metav1.Object); ok {
		if k, owned := ownedKey(m); owned {
			return []string{k}, nil
		}
	}
	return nil, nil
}

// indexByCluster indexes by the cluster part of indexByKey's key.
func indexByCluster(obj any) ([]string, error) {
	keys, err := indexByKey(obj)
	for i, k := range keys {
		keys[i], _, _ = strings.Cut(k, "/")
	}
	return keys, err
}

func indexSliceByService(obj any) ([]string, error) {
	if m, ok := obj.(metav1.Object); ok {
		if svc := m.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			return []string{m.GetNamespace() + "/" + svc}, nil
		}
	}
	return nil, nil
}

func metaOf(obj any) (metav1.Object, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	return m, ok
}

// trim drops managed fields from cached objects: memory, not meaning.
func trim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// trimKeeping is trim but for the managed fields of manager.
func trimKeeping(manager string) cache.TransformFunc {
	return func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			kept := slices.DeleteFunc(m.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool { return f.Manager != manager })
			if len(kept) == 0 {
				kept = nil
			}
			m.SetManagedFields(kept)
		}
		return obj, nil
	}
}

package controller

// The derived Service's name, and the upgrade from the names of earlier
// releases. A derived Service was named derived-<10 hex digits of
// sha256(<ns>/<name>)>: 40 bits, within reach of a collision between two
// imports of a namespace, by chance at scale and by search for anyone who
// may choose Service names there. It is derived-<32 hex digits> now: 128
// bits. A derived Service under its former name that belongs to the
// import is taken over when the import is synced: its EndpointSlices and
// it are deleted, and the derived Service is made again under the new
// name with the same ClusterIPs, so that the ClusterSetIP survives the
// upgrade (when the API server has meanwhile given the address to another
// Service, the new one gets a new address, and the ServiceImport says so).

import (
	"context"
	"maps"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

const (
	// derivedHashDigits is how many hex digits of the hash name a derived
	// Service (128 bits): with derivedPrefix, 40 characters of the 63 a
	// Service name may have.
	derivedHashDigits = 32
	// legacyHashDigits is how many named it before.
	legacyHashDigits = 10
)

// legacyDerivedName is the name the derived Service of namespace/name had
// in earlier releases.
func legacyDerivedName(ns, name string) string {
	return derivedPrefix + derivedHash(ns, name)[:legacyHashDigits]
}

// migrateDerived takes over the derived Service of namespace/name under
// its former name, if there is one that the controller made for this
// import: it deletes its EndpointSlices and it, then, when the import is
// wanted and has no derived Service under its name yet (live is nil), makes
// that one with the former one's ClusterIPs. It returns the derived Service
// under its name as it is afterwards (live, or the one it made).
func (c *Controller) migrateDerived(ctx context.Context, ns, name string, live *corev1.Service, wanted bool) (*corev1.Service, error) {
	oldName := legacyDerivedName(ns, name)
	obj, ok, _ := c.services.GetIndexer().GetByKey(ns + "/" + oldName)
	if !ok {
		return live, nil
	}
	old, _ := obj.(*corev1.Service)
	if old == nil || old.Labels[labels.ManagedBy] != labels.ManagedByValue || old.Labels[labels.ServiceImport] != name {
		// Not this import's: a user's Service, or another import's.
		return live, nil
	}
	// The slices first: once the Service is gone from the cache, nothing
	// would find them again.
	for _, es := range c.derivedSlices(ns, oldName, name) {
		err := c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, es.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &es.UID}})
		if err := countWrite("delete", "endpointslices", err); err != nil && !apierrors.IsNotFound(err) {
			return live, err
		}
	}
	services := c.client.CoreV1().Services(ns)
	err := services.Delete(ctx, oldName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}})
	if err := countWrite("delete", "services", err); err != nil && !apierrors.IsNotFound(err) {
		return live, err
	}
	logger := klog.FromContext(ctx)
	if live != nil || !wanted || old.Spec.ClusterIP == corev1.ClusterIPNone || len(old.Spec.ClusterIPs) == 0 {
		logger.Info("Deleted the derived Service under its former name", "service", klog.KObj(old), "serviceImport", klog.KRef(ns, name))
		return live, nil
	}
	next := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: DerivedName(ns, name), Namespace: ns,
			Labels: maps.Clone(old.Labels), OwnerReferences: slices.Clone(old.OwnerReferences),
		},
		Spec: *old.Spec.DeepCopy(),
	}
	created, err := services.Create(ctx, next, metav1.CreateOptions{})
	if err := countWrite("create", "services", err); err != nil {
		if apierrors.IsInvalid(err) {
			// The address was taken meanwhile: the sync makes the
			// derived Service with a new one.
			logger.Info("Derived Service renamed without its former ClusterIPs", "service", klog.KObj(old), "clusterIPs", old.Spec.ClusterIPs, "err", err)
			return nil, nil
		}
		return nil, err
	}
	logger.Info("Renamed the derived Service, keeping its ClusterIPs", "from", klog.KObj(old), "to", klog.KObj(created), "clusterIPs", created.Spec.ClusterIPs)
	return created, nil
}

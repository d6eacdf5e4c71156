package remote

import (
	"context"

	"github.com/mcmirror/mcmirror/internal/link"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kind is a kind of object watched in a cluster.
type Kind int

// The kinds watched.
const (
	Services Kind = iota
	EndpointSlices
)

var kindNames = [...]string{"service", "endpointslice"}

// String is the kind's name in metrics: service, endpointslice.
func (k Kind) String() string { return kindNames[k] }

// Object returns an empty object of the kind, for a reflector.
func (k Kind) Object() runtime.Object {
	if k == EndpointSlices {
		return &discoveryv1.EndpointSlice{}
	}
	return &corev1.Service{}
}

// Requests returns the list and watch of the objects of kind that selector
// selects in the cluster client talks to, in the namespaces ns allows
// (namespaces.go; every namespace for the zero value). Each request
// is reported to h as its watch w; one that finds the cluster unreachable
// or refusing is retried, Backoff apart, until answered, so that the
// reflector above sees no failure and its own backoff (up to a minute
// between tries) does not grow; other answers go to the reflector. Every
// object received, listed or watched, is counted by cluster and kind,
// before what ns does not allow is left out.
//
// Wrap the functions to act around each request; cache.ToListWatcherWithWatchListSemantics
// (or ListWatch) makes it a ListerWatcher.
func Requests(client kubernetes.Interface, kind Kind, selector string, ns link.Namespaces, h *Health, w int) *cache.ListWatch {
	services := client.CoreV1().Services(metav1.NamespaceAll)
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return services.List(ctx, o) }
	watchf := services.Watch
	if kind == EndpointSlices {
		eps := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return eps.List(ctx, o) }
		watchf = eps.Watch
	}
	received := Received.WithLabelValues(h.Name(), kind.String())
	fields := fieldSelector(ns)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = selector, fields
			l, err := retried(ctx, h, w, func() (runtime.Object, error) { return list(ctx, o) })
			if err == nil {
				received.Add(float64(meta.LenList(l)))
				err = narrowList(ns, l)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = selector, fields
			wi, err := retried(ctx, h, w, func() (watch.Interface, error) { return watchf(ctx, o) })
			if err != nil {
				return wi, err
			}
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				switch e.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					received.Inc()
				}
				return e, narrowEvent(ns, e)
			}), nil
		},
	}
}

// ListWatch is Requests as a ListerWatcher.
func ListWatch(client kubernetes.Interface, kind Kind, selector string, ns link.Namespaces, h *Health, w int) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(Requests(client, kind, selector, ns, h, w), client)
}

// OnAny is an informer's event handler that calls fn with the object of
// every add, update (the new one) and delete.
func OnAny(fn func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{AddFunc: fn, UpdateFunc: func(_, obj any) { fn(obj) }, DeleteFunc: fn}
}

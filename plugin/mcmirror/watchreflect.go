package mcmirror

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The requests of the watches: the reflectors' lists and watches, and the
// targeted lists of the slices of a newly exported Service, each reported
// to the cluster's health.

// reflector lists and watches the objects of one kind that selector
// selects into store, reporting each list and watch to the cluster's
// health.
func (c *watcher) reflector(cl *cluster, w int, obj runtime.Object, selector string, store *objectStore) *cache.Reflector {
	var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
	var watchf func(context.Context, metav1.ListOptions) (watch.Interface, error)
	switch obj.(type) {
	case *corev1.Service:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cl.client.CoreV1().Services(corev1.NamespaceAll).List(ctx, o)
		}
		watchf = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cl.client.CoreV1().Services(corev1.NamespaceAll).Watch(ctx, o)
		}
	case *discovery.EndpointSlice:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cl.client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).List(ctx, o)
		}
		watchf = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cl.client.DiscoveryV1().EndpointSlices(corev1.NamespaceAll).Watch(ctx, o)
		}
	}
	what := cl.name + "/" + watchNames[w]
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			if o.Continue == "" {
				c.awaitRelist(ctx, store, what)
			}
			done := cl.watchdog(ctx, w)
			l, err := list(ctx, o)
			done(err)
			if err != nil {
				store.endRelist()
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			var sl *relistSlot
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				sl = c.awaitRelist(ctx, store, what) // a watch-list
			}
			done := cl.watchdog(ctx, w)
			wi, err := watchf(ctx, o)
			done(err)
			if err != nil {
				store.endRelistOf(sl)
				return wi, err
			}
			if sl != nil {
				wi = &relistWatch{Interface: wi, store: store, slot: sl}
			}
			return wi, err
		},
	}
	backoff := c.backoff
	return cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, cl.client), obj, store, cache.ReflectorOptions{
		Name:    "mcmirror/" + cl.name + "/" + watchNames[w],
		Backoff: &backoff,
	})
}

// awaitRelist waits for the relist gate when store lists again (it has
// listed before: a first list is never held up), and records the slot in
// store, whose Replace gives it back. It returns the slot; nil for a first
// list, when the store's relist already holds one (a request of the same
// relist, such as client-go's consistency check of a watch-list), or when
// ctx ended while waiting.
func (c *watcher) awaitRelist(ctx context.Context, store *objectStore, what string) *relistSlot {
	if !store.HasSynced() || store.relisting() {
		return nil
	}
	sl := c.relists.acquire(ctx, what)
	if sl != nil {
		store.beginRelist(sl)
	}
	return sl
}

// relistWatch is the stream of a relist by watch-list: stopped before its
// Replace (the stream failed, or the watches stop), it gives the slot back.
type relistWatch struct {
	watch.Interface
	store *objectStore
	slot  *relistSlot
}

func (w *relistWatch) Stop() {
	w.store.endRelistOf(w.slot)
	w.Interface.Stop()
}

// noAnswerAfter is how long a list or watch of a cluster may go without an
// answer before the cluster counts as unreachable: client-go retries a
// watch whose TLS handshake times out (10 s) up to ten times before it
// returns, and a server may accept and never answer.
var noAnswerAfter = 15 * time.Second

var errNoAnswer = fmt.Errorf("no answer within %s", noAnswerAfter)

// watchdog reports the cluster unreachable if the request that starts now
// has not been answered within noAnswerAfter; the returned function
// reports its outcome when it ends.
func (cl *cluster) watchdog(ctx context.Context, w int) func(error) {
	var mu sync.Mutex
	ended := false
	t := time.AfterFunc(noAnswerAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			cl.apiResult(ctx, w, errNoAnswer)
		}
	})
	return func(err error) {
		mu.Lock()
		ended = true
		mu.Unlock()
		t.Stop()
		cl.apiResult(ctx, w, err)
	}
}

// apiResult reports a list or watch to the cluster's health, unless the
// watches are stopping.
func (cl *cluster) apiResult(ctx context.Context, w int, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	cl.health.result(w, err)
}

// fetchSlices lists the EndpointSlices of Service ns/name of cl, which
// became exported: the slice watch dropped them while it was not. It
// retries until the list answers, the Service is no longer exported, or the
// watches stop.
func (c *watcher) fetchSlices(cl *cluster, ns, name string) {
	key := ns + "/" + name
	ctx, cancel := context.WithCancel(cl.ctx)
	f := cl.slices.beginFetch(key, cancel)
	if f == nil {
		cancel() // the first list of slices is still to come
		return
	}
	go func() {
		defer cancel()
		backoff := c.backoff
		for {
			l, err := cl.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.ServiceName + "=" + name})
			if ctx.Err() != nil {
				return
			}
			cl.apiResult(ctx, watchSlices, err)
			if err == nil {
				items := make([]any, len(l.Items))
				for i := range l.Items {
					items[i] = &l.Items[i]
				}
				sliceFetches.Inc()
				cl.slices.endFetch(key, f, items)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff.Step()):
			}
		}
	}()
}

package watch

import (
	"context"

	"github.com/mcmirror/mcmirror/internal/remote"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The requests of the watches: the reflectors' lists and watches, each
// reported to the cluster's health.

// reflector lists and watches the objects of kind that selector selects
// into store, through remote.Requests (each request reported to the
// cluster's health, retried while the cluster is unreachable), a relist
// waiting for the relist gate.
func (c *Watcher) reflector(cl *cluster, w int, kind remote.Kind, selector string, store *objectStore) *cache.Reflector {
	what := cl.name + "/" + watchNames[w]
	req := remote.Requests(cl.client, kind, selector, cl.namespaces, cl.health.core, w)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.Continue == "" {
				c.awaitRelist(ctx, store, what)
			}
			l, err := req.ListWithContextFunc(ctx, o)
			if err != nil {
				store.endRelist()
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			var sl *relistSlot
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				sl = c.awaitRelist(ctx, store, what) // a watch-list
			}
			wi, err := req.WatchFuncWithContext(ctx, o)
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
	return cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, cl.client), kind.Object(), store, cache.ReflectorOptions{
		Name:    "mcmirror/" + what,
		Backoff: &backoff,
	})
}

// awaitRelist waits for the relist gate when store lists again (it has
// listed before: a first list is never held up), and records the slot in
// store, whose Replace gives it back. It returns the slot; nil for a first
// list, when the store's relist already holds one (a request of the same
// relist, such as client-go's consistency check of a watch-list), or when
// ctx ended while waiting.
func (c *Watcher) awaitRelist(ctx context.Context, store *objectStore, what string) *relistSlot {
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

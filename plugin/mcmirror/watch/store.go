package watch

import (
	"sync"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// objectStore is what a reflector writes one kind of object of one cluster
// into, in place of a SharedIndexInformer: each object is trimmed as it
// arrives (no queue of whole API objects), kept only when keep says it can
// be answered, and every change is told to a handler, in the reflector's
// goroutine. A watch error never touches it: what a cluster said last stays
// until the cluster says otherwise (a watch event, or a relist).
type objectStore struct {
	transform cache.TransformFunc
	// keep reports whether a trimmed object is held; nil holds all.
	keep    func(obj any) bool
	handler storeHandler
	idx     cache.Indexer

	// mu serialises writes with the relist's bookkeeping.
	mu     sync.Mutex
	synced bool          // a first Replace was made; guarded by mu
	done   chan struct{} // closed by the first Replace
	// bookmark is told of watch bookmarks: the cluster is alive.
	bookmark func()
	// relist is the relistGate slot of the relist in progress, given
	// back when its Replace is done (or its request fails); guarded by mu.
	relist *relistSlot
}

// storeHandler receives the changes of an objectStore, trimmed.
type storeHandler struct {
	add    func(obj any, initial bool)
	update func(old, obj any)
	del    func(obj any)
}

func newObjectStore(transform cache.TransformFunc, keep func(any) bool, indexers cache.Indexers, h storeHandler) *objectStore {
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	return &objectStore{
		transform: transform,
		keep:      keep,
		handler:   h,
		idx:       cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers),
		done:      make(chan struct{}),
	}
}

// HasSynced reports whether the first list has been stored.
func (s *objectStore) HasSynced() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Transformer implements cache.TransformingStore: the reflector trims the
// objects of an initial watch-list as they come, too, reusing the held
// ones that did not change.
func (s *objectStore) Transformer() cache.TransformFunc { return s.trim }

// trim trims a listed object; when the store holds it at the same
// resourceVersion, it returns the held one: a relist of objects that did
// not change allocates nothing that outlives the decoded list. Before the
// first list the store is empty: nothing to look up.
func (s *objectStore) trim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok && m.GetResourceVersion() != "" && s.HasSynced() {
		key := m.GetName()
		if ns := m.GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
		if held, ok, _ := s.idx.GetByKey(key); ok && object.Version(held) == m.GetResourceVersion() {
			return held, nil
		}
	}
	return s.transform(obj)
}

// beginRelist records the gate slot of the relist that starts: the next
// Replace gives it back.
func (s *objectStore) beginRelist(sl *relistSlot) {
	s.mu.Lock()
	old := s.relist
	s.relist = sl
	s.mu.Unlock()
	old.release()
}

// endRelistOf gives back sl, the slot of a relist whose request ended
// (its Replace may have given it back already), and forgets it.
func (s *objectStore) endRelistOf(sl *relistSlot) {
	if sl == nil {
		return
	}
	s.mu.Lock()
	if s.relist == sl {
		s.relist = nil
	}
	s.mu.Unlock()
	sl.release()
}

// relisting reports whether a relist of the store holds a gate slot.
func (s *objectStore) relisting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relist != nil
}

// endRelist gives back the slot of the relist in progress, if any: its
// Replace is done, or its request failed.
func (s *objectStore) endRelist() {
	s.mu.Lock()
	sl := s.relist
	s.relist = nil
	s.mu.Unlock()
	sl.release()
}

// Add implements cache.ReflectorStore.
func (s *objectStore) Add(obj any) error { return s.upsert(obj) }

// Update implements cache.ReflectorStore.
func (s *objectStore) Update(obj any) error { return s.upsert(obj) }

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (s *objectStore) Resync() error { return nil }

// Bookmark implements cache.ReflectorBookmarkStore.
func (s *objectStore) Bookmark(string) error {
	if s.bookmark != nil {
		s.bookmark()
	}
	return nil
}

// transformed returns obj trimmed, and its key.
func (s *objectStore) transformed(obj any) (any, string, error) {
	t, err := s.transform(obj)
	if err != nil {
		return nil, "", err
	}
	key, err := cache.MetaNamespaceKeyFunc(t)
	return t, key, err
}

func (s *objectStore) upsert(obj any) error {
	t, key, err := s.transformed(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists, _ := s.idx.GetByKey(key)
	if s.keep != nil && !s.keep(t) {
		if exists {
			_ = s.idx.Delete(old)
			s.handler.del(old)
		}
		return nil
	}
	_ = s.idx.Update(t)
	if exists {
		s.handler.update(old, t)
	} else {
		s.handler.add(t, false)
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (s *objectStore) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	_, key, err := s.transformed(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, exists, _ := s.idx.GetByKey(key); exists {
		_ = s.idx.Delete(old)
		s.handler.del(old)
	}
	return nil
}

// Replace implements cache.ReflectorStore: the store becomes list, and the
// handler is told the difference. An object whose resourceVersion did not
// change is neither told again nor replaced: the held one stays (trim
// already returned it), so a relist that changed nothing writes nothing
// and queues no group. The first list is stored in one go.
func (s *objectStore) Replace(list []any, rv string) error {
	defer s.endRelist() // after mu is released
	items := make([]any, 0, len(list))
	for _, obj := range list {
		t, err := s.trim(obj)
		if err != nil {
			return err
		}
		if s.keep == nil || s.keep(t) {
			items = append(items, t)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := !s.synced
	if len(s.idx.ListKeys()) == 0 {
		if err := s.idx.Replace(items, rv); err != nil {
			return err
		}
		for _, t := range items {
			s.handler.add(t, initial)
		}
	} else {
		s.apply(items, initial)
	}
	if !s.synced {
		s.synced = true
		close(s.done)
	}
	return nil
}

// apply makes the store hold items, object by object, and tells the
// handler each change; s.mu is held.
func (s *objectStore) apply(items []any, initial bool) {
	listed := make(map[string]struct{}, len(items))
	for _, t := range items {
		k, err := cache.MetaNamespaceKeyFunc(t)
		if err != nil {
			continue
		}
		listed[k] = struct{}{}
		o, ok, _ := s.idx.GetByKey(k)
		switch {
		case !ok:
			_ = s.idx.Add(t)
			s.handler.add(t, initial)
		case o == t:
			// The held object, reused by trim.
		case object.Version(o) != "" && object.Version(o) == object.Version(t):
			// Unchanged: the held one stays.
		default:
			_ = s.idx.Update(t)
			s.handler.update(o, t)
		}
	}
	for _, k := range s.idx.ListKeys() {
		if _, ok := listed[k]; ok {
			continue
		}
		if o, ok, _ := s.idx.GetByKey(k); ok {
			_ = s.idx.Delete(o)
			s.handler.del(o)
		}
	}
}

// serviceTransform returns the informer transform for the Services that
// export selects: the export selector's, or the ServiceExport stamp's.
func serviceTransform(export k8slabels.Selector) cache.TransformFunc {
	return func(obj any) (any, error) {
		t, err := object.ToService(obj)
		if s, ok := obj.(*corev1.Service); ok && err == nil {
			t.(*object.Service).Exported = export.Matches(k8slabels.Set(s.Labels))
		}
		return t, err
	}
}

// sliceTransform trims, with trim (object.ToSlice, object.ToMirrorSlice),
// the EndpointSlices a watch selects by sel; one sel does not select (a
// watch that does not filter) becomes its bare key, which the store does
// not keep (isSlice).
func sliceTransform(sel k8slabels.Selector, trim cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if s, ok := obj.(*discovery.EndpointSlice); ok && !sel.Matches(k8slabels.Set(s.Labels)) {
			return &object.Meta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion}, nil
		}
		return trim(obj)
	}
}

// slicesByService is the index function of sliceServiceIndex: a slice by
// the namespace/name of its Service.
func slicesByService(obj any) ([]string, error) {
	s, ok := obj.(*object.Slice)
	if !ok || s.Service == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Service}, nil
}

// isSlice reports whether a store keeps obj: a Slice, not a bare key.
func isSlice(obj any) bool {
	_, ok := obj.(*object.Slice)
	return ok
}

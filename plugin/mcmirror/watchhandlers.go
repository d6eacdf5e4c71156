package mcmirror

import (
	"github.com/mcmirror/mcmirror/internal/labels"
)

// The handlers of the stores: each change only queues the groups it
// touches, and counts the objects held.

// handler adapts typed add/update/delete functions.
func handler[T any](add func(T, bool), update func(T, T), del func(T)) storeHandler {
	return storeHandler{
		add: func(obj any, initial bool) {
			if t, ok := obj.(T); ok {
				add(t, initial)
			}
		},
		update: func(old, obj any) {
			o, ok1 := old.(T)
			n, ok2 := obj.(T)
			if ok1 && ok2 {
				update(o, n)
			}
		},
		del: func(obj any) {
			if t, ok := obj.(T); ok {
				del(t)
			}
		},
	}
}

// serviceHandler handles the changes of one of the cluster's three stores
// of Services (serviceStores), whose objects count as kind. A Service's
// slices are held while any store holds it: they are fetched when the
// first one takes it, and dropped when none holds it any longer. A store writes
// an object before it tells its handler, which then looks at the other
// store: of two stores that change one Service at once, the one told last
// sees both changes, and decides.
func (c *watcher) serviceHandler(cl *cluster, kind int) storeHandler {
	return handler(
		func(s *Service, _ bool) {
			cl.touched(kind, 1)
			c.enqueue(groupKey{s.Namespace, s.Name})
			// Held now: its slices, dropped until now, are fetched
			// (before the first list of slices, that list holds them),
			// unless another store holds it, and so its slices.
			if !cl.heldByOther(kind, s.Namespace+"/"+s.Name) {
				c.fetchSlices(cl, s.Namespace, s.Name)
			}
		},
		func(_, s *Service) {
			cl.touched(kind, 0)
			c.enqueue(groupKey{s.Namespace, s.Name})
		},
		func(s *Service) {
			cl.touched(kind, -1)
			c.enqueue(groupKey{s.Namespace, s.Name})
			// No longer held, unless another store holds it: its
			// slices are not held. Asked under the slice store's lock,
			// so that no slice kept meanwhile for another store's
			// Service is dropped.
			cl.slices.dropUnless(sliceServiceIndex, s.Namespace+"/"+s.Name, func() bool {
				return cl.holds(s.Namespace, s.Name)
			})
		},
	)
}

func (c *watcher) sliceHandler(cl *cluster) storeHandler {
	// The store holds only slices of exported Services.
	return handler(
		func(s *Slice, initial bool) {
			cl.touched(objSlice, 1)
			k := groupKey{s.Namespace, s.Service}
			if !initial && !s.TriggerTime.IsZero() {
				c.noteTrigger(k, cl.name, s.TriggerTime)
			}
			c.enqueue(k)
		},
		func(old, s *Slice) {
			cl.touched(objSlice, 0)
			if old.Service != s.Service {
				c.enqueue(groupKey{old.Namespace, old.Service})
			}
			k := groupKey{s.Namespace, s.Service}
			if !s.TriggerTime.IsZero() && !s.TriggerTime.Equal(old.TriggerTime) {
				c.noteTrigger(k, cl.name, s.TriggerTime)
			}
			c.enqueue(k)
		},
		func(s *Slice) {
			cl.touched(objSlice, -1)
			c.enqueue(groupKey{s.Namespace, s.Service})
		},
	)
}

func (c *watcher) mirrorHandler(cl *cluster) storeHandler {
	enqueue := func(m *Mirror) {
		if k, ok := mirrorGroup(m); ok {
			c.enqueue(k)
		}
		if k, ok := federatedGroup(m); ok {
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
// number of objects of kind held.
func (cl *cluster) touched(kind int, delta int64) {
	if delta != 0 {
		cl.health.counted(kind, delta)
	}
	cl.health.contact()
}

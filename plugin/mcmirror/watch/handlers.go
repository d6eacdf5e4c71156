package watch

import (
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
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
// slices come by their own watch, selected by the same way of export.
func (c *Watcher) serviceHandler(cl *cluster, kind int) storeHandler {
	enqueue := func(s *object.Service, delta int64) {
		cl.touched(kind, delta)
		c.Enqueue(object.ServiceKey(s.Namespace, s.Name))
	}
	return handler(
		func(s *object.Service, _ bool) { enqueue(s, 1) },
		func(_, s *object.Service) { enqueue(s, 0) },
		func(s *object.Service) { enqueue(s, -1) },
	)
}

func (c *Watcher) sliceHandler(cl *cluster) storeHandler {
	// The stores hold only slices of exported Services (remote.Way.Slices).
	return handler(
		func(s *object.Slice, initial bool) {
			cl.touched(objSlice, 1)
			k := object.ServiceKey(s.Namespace, s.Service)
			if !initial && !s.TriggerTime.IsZero() {
				c.noteTrigger(k, cl.name, s.TriggerTime)
			}
			c.Enqueue(k)
		},
		func(old, s *object.Slice) {
			cl.touched(objSlice, 0)
			if old.Service != s.Service {
				c.Enqueue(object.ServiceKey(old.Namespace, old.Service))
			}
			k := object.ServiceKey(s.Namespace, s.Service)
			if !s.TriggerTime.IsZero() && !s.TriggerTime.Equal(old.TriggerTime) {
				c.noteTrigger(k, cl.name, s.TriggerTime)
			}
			c.Enqueue(k)
		},
		func(s *object.Slice) {
			cl.touched(objSlice, -1)
			c.Enqueue(object.ServiceKey(s.Namespace, s.Service))
		},
	)
}

func (c *Watcher) mirrorHandler(cl *cluster) storeHandler {
	enqueue := func(m *object.Mirror) {
		if k, ok := object.MirrorGroup(m); ok {
			c.Enqueue(k)
		}
		if k, ok := object.FederatedGroup(m); ok {
			c.Enqueue(k)
		}
	}
	return handler(
		func(m *object.Mirror, _ bool) { cl.touched(objMirror, 1); enqueue(m) },
		func(old, m *object.Mirror) { cl.touched(objMirror, 0); enqueue(old); enqueue(m) },
		func(m *object.Mirror) { cl.touched(objMirror, -1); enqueue(m) },
	)
}

// touched records an event from the cluster: delta is the change in the
// number of objects of kind held.
func (cl *cluster) touched(kind int, delta int64) {
	if delta != 0 {
		cl.health.counted(kind, delta)
	}
	cl.health.contact()
}

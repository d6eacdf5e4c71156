package controller

// The watches of a link, through internal/remote: per way of export, the
// Services it exports and their EndpointSlices, selected on the linked
// API server; and the link's health in link_up, link_errors_total and
// one log line per change.

import (
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// linkWay is one way a link exports Services: the informers of those
// Services and of their EndpointSlices.
type linkWay struct {
	way      remote.Way
	services cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
}

// linkWays returns the informers of link r for each way the controller
// mirrors: the export selector's, and the ServiceExport stamp's.
func linkWays(r *remoteCluster, ways []remote.Way) []*linkWay {
	out := make([]*linkWay, len(ways))
	for i, w := range ways {
		out[i] = &linkWay{
			way:      w,
			services: linkInformer(r, remote.Services, w.Services, w.Name, 2*i, cache.Indexers{}),
			slices: linkInformer(r, remote.EndpointSlices, w.Slices(), w.SlicesName(), 2*i+1,
				cache.Indexers{byService: indexSliceByService}),
		}
	}
	return out
}

// watchNames names a link's watches, as linkWays numbers them.
func watchNames(ways []remote.Way) []string {
	var names []string
	for _, w := range ways {
		names = append(names, w.Name, w.SlicesName())
	}
	return names
}

func linkInformer(r *remoteCluster, kind remote.Kind, sel k8slabels.Selector, what string, w int, indexers cache.Indexers) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(remote.ListWatch(r.client, kind, sel.String(), r.namespaces, r.health, w), kind.Object(),
		cache.SharedIndexInformerOptions{ResyncPeriod: resyncPeriod, Indexers: indexers, ObjectDescription: "mcmirror/" + r.name + "/" + what})
	_ = inf.SetTransform(trim)
	return inf
}

// newLinkHealth returns the health of link name, which writes link_up
// while serving says so. A first link of the name starts down with every
// error reason at 0; a replacement leaves link_up to its predecessor until
// it serves.
func newLinkHealth(name string, watches []string, replacement bool, serving *atomic.Bool) *remote.Health {
	if !replacement {
		linkUp.WithLabelValues(name).Set(0)
		for _, r := range link.FailureReasons {
			linkErrors.WithLabelValues(name, r)
		}
	}
	var h *remote.Health
	h = remote.NewHealth(name, watches, remote.Hooks{
		Failed: func(reason string) { linkErrors.WithLabelValues(name, reason).Inc() },
		Down: func(watch, reason string, err error, _ bool) {
			klog.ErrorS(err, "Link down: retrying; its mirrors are kept", "cluster", name, "reason", reason, "watch", watch)
		},
		Up: func(downFor time.Duration) {
			if downFor == 0 {
				klog.InfoS("Link up", "cluster", name)
			} else {
				klog.InfoS("Link up again", "cluster", name, "after", downFor.Round(time.Second))
			}
		},
		Changed: func() {
			if serving.Load() {
				linkUp.WithLabelValues(name).Set(b2f(h.Up()))
			}
		},
	})
	return h
}

// deleteLinkSeries deletes the series of a removed link.
func deleteLinkSeries(name string) {
	linkUp.DeleteLabelValues(name)
	linkSynced.DeleteLabelValues(name)
	linkStartupTimeouts.DeleteLabelValues(name)
	for _, r := range link.FailureReasons {
		linkErrors.DeleteLabelValues(name, r)
	}
	remote.Forget(name)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// exportedKeys returns the Services that r's Service informers hold, by
// any way of export, each once.
func (r *remoteCluster) exportedKeys() []cache.ObjectName {
	seen := map[cache.ObjectName]bool{}
	var out []cache.ObjectName
	for _, w := range r.ways {
		for _, k := range w.services.GetStore().ListKeys() {
			n, err := cache.ParseObjectName(k)
			if err != nil || seen[n] {
				continue
			}
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// holds reports whether one of r's Service informers holds Service
// ns/name, exported or not (a watch that does not filter).
func (r *remoteCluster) holds(ns, name string) bool {
	for _, w := range r.ways {
		if _, ok, _ := w.services.GetStore().GetByKey(ns + "/" + name); ok {
			return true
		}
	}
	return false
}

// exportedService returns the remote Service ns/name when it is exported:
// held by a way's informer and matching its selector, the first way first.
// Each informer filters by its selector already; the check guards against
// a watch that does not.
func (r *remoteCluster) exportedService(ns, name string) *corev1.Service {
	for _, w := range r.ways {
		obj, ok, _ := w.services.GetStore().GetByKey(ns + "/" + name)
		if !ok {
			continue
		}
		if s, isSvc := obj.(*corev1.Service); isSvc && w.way.Services.Matches(k8slabels.Set(s.Labels)) {
			return s
		}
	}
	return nil
}

// slicesOf returns the EndpointSlices of r's Service ns/name, from every
// way that holds them, each once.
func (r *remoteCluster) slicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, w := range r.ways {
		out = appendSlices(out, w.slices, ns+"/"+name)
	}
	return out
}

// informers returns r's informers.
func (r *remoteCluster) informers() []cache.SharedIndexInformer {
	var out []cache.SharedIndexInformer
	for _, w := range r.ways {
		out = append(out, w.services, w.slices)
	}
	return out
}

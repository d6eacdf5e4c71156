package controller

// The informers of a link, whose lists and watches retry quickly and
// report to the link's health.
//
// A SharedIndexInformer does not take a backoff: its reflector waits
// client-go's default, 800 ms doubling to 30 s with as much jitter, after
// each failed list, so a cluster down for a minute was watched again up to
// a minute after its return. Here a list or watch that finds the cluster
// unreachable or refusing retries itself, linkBackoff apart, and returns
// only once answered (or its informer stops): the reflector sees no
// failure and its own backoff does not grow. Other answers (a 410 Expired,
// a 429, ...) go to the reflector as before, which handles them.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// linkBackoff is how a list or watch of a link retries while the cluster
// is unreachable or refuses: 250 ms doubling to 2 s, plus up to 50 %
// jitter, so a cluster that comes back is watched again within 3 s. It
// costs a failed request every 2 to 3 s per watch while a cluster is
// down, as the DNS plugin's watches.
var linkBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 100, Cap: 2 * time.Second}

// noAnswerAfter is how long a list or watch of a link may go without an
// answer before the link counts as unreachable: client-go retries a
// request whose TLS handshake times out (10 s) before it returns, and a
// server may accept and never answer.
// A link reads it when it is made.
var noAnswerAfter = 15 * time.Second

// retriedReason reports whether a list or watch failing for reason is
// retried by the link's own loop rather than by the reflector.
func retriedReason(reason string) bool {
	return reason != link.FailureError
}

// serviceExportSelector selects the Services a ServiceExport stamped
// (labels.ServiceExportMode), mirrors never.
var serviceExportSelector = func() k8slabels.Selector {
	sel, err := k8slabels.Parse(labels.ServiceExportSelector)
	if err != nil {
		panic(err)
	}
	return sel
}()

// linkInformers returns the Service and EndpointSlice informers of link r:
// the Services exported by exportSelector, those a ServiceExport stamped
// (serviceExportSelector: a label selector cannot OR two keys, so they
// are watched apart), and every EndpointSlice of a Service.
func linkInformers(r *remoteCluster, exportSelector string) (services, mcsServices, slices cache.SharedIndexInformer) {
	client := r.client
	servicesOf := func(w int, selector, what string) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformerWithOptions(
			linkListWatch(r, w, selector,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return client.CoreV1().Services(metav1.NamespaceAll).List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return client.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, o)
				}, client),
			&corev1.Service{},
			cache.SharedIndexInformerOptions{ResyncPeriod: resyncPeriod, Indexers: cache.Indexers{}, ObjectDescription: "mcmirror/" + r.name + "/" + what})
	}
	services = servicesOf(watchServices, exportSelector, "Services")
	mcsServices = servicesOf(watchServiceExports, serviceExportSelector.String(), "ServiceExportServices")
	slices = cache.NewSharedIndexInformerWithOptions(
		linkListWatch(r, watchSlices, discoveryv1.LabelServiceName,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
			}, client),
		&discoveryv1.EndpointSlice{},
		cache.SharedIndexInformerOptions{ResyncPeriod: resyncPeriod, Indexers: cache.Indexers{byService: indexSliceByService},
			ObjectDescription: "mcmirror/" + r.name + "/EndpointSlices"})
	return services, mcsServices, slices
}

// linkListWatch lists and watches what selector selects through list and
// watchf, each request reported to r's health and retried while the
// cluster is unreachable or refuses.
func linkListWatch(r *remoteCluster, w int, selector string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchf func(context.Context, metav1.ListOptions) (watch.Interface, error),
	client kubernetes.Interface) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return retried(ctx, r.health, w, func() (runtime.Object, error) { return list(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return retried(ctx, r.health, w, func() (watch.Interface, error) { return watchf(ctx, o) })
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// retried runs request until it is answered with something other than
// unreachable or refused, or ctx ends, linkBackoff apart; each attempt is
// reported to h.
func retried[T any](ctx context.Context, h *linkHealth, w int, request func() (T, error)) (T, error) {
	backoff := linkBackoff
	for {
		done := watchdog(ctx, h, w)
		v, err := request()
		done(err)
		if err == nil || ctx.Err() != nil || !retriedReason(link.FailureReason(err)) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff.Step()):
		}
	}
}

// watchdog reports the link unreachable each h.noAnswer the request that
// starts now goes unanswered (client-go retries a watch whose TLS
// handshake times out for minutes before it returns); the returned
// function reports its outcome when it ends. Nothing is reported once ctx
// ends: the informer is stopping.
func watchdog(ctx context.Context, h *linkHealth, w int) func(error) {
	var mu sync.Mutex
	ended := false
	report := func(err error) {
		if err != nil && ctx.Err() != nil {
			return
		}
		h.result(w, err)
	}
	mu.Lock()
	var t *time.Timer
	t = time.AfterFunc(h.noAnswer, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			report(fmt.Errorf("no answer within %s", h.noAnswer))
			t.Reset(h.noAnswer)
		}
	})
	mu.Unlock()
	return func(err error) {
		mu.Lock()
		ended = true
		t.Stop()
		mu.Unlock()
		report(err)
	}
}

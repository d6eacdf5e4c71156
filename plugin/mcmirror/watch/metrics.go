package watch

import (
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// log is the plugin's: its lines say plugin/mcmirror, whichever package
// writes them.
var log = clog.NewWithPlugin("mcmirror")

// Every label here has a handful of values: a cluster name, a kind of
// object. Never an address or a Service name.
var (
	// linkSynced is 1 once the informers of a cluster have synced.
	linkSynced = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_synced",
		Help:      "Whether the informers of a cluster (linked or local) have synced: 1 or 0.",
	}, []string{"cluster"})

	// linkLastSync is when a cluster last told us something.
	linkLastSync = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_last_sync_timestamp_seconds",
		Help:      "Unix time of the last successful list or watch, watch event or watch bookmark of a cluster.",
	}, []string{"cluster"})

	// linkUp is whether every list and watch of a cluster works.
	linkUp = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_up",
		Help:      "Whether the last list or watch of each kind of object of a cluster succeeded: 1 or 0. While 0, its last known state is answered (see link_withdrawn).",
	}, []string{"cluster"})

	// linkErrors counts failed lists and watches, by reason.
	linkErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_errors_total",
		Help:      "Number of failed lists and watches against a cluster, by reason (unreachable, unauthorized, forbidden, error).",
	}, []string{"cluster", "reason"})

	// linkWithdrawn is whether a linked cluster's names are withdrawn for
	// being stale longer than stale_max_age.
	linkWithdrawn = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_withdrawn",
		Help:      "Whether the names of a linked cluster are withdrawn, its watches having failed for longer than stale_max_age: 1 or 0.",
	}, []string{"cluster"})

	// relistsActive is 1 while a relist waits for its turn or lists.
	relistsActive = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "relist_in_progress",
		Help:      "1 while a linked or local cluster relists (its watch could not resume), waiting for its turn or listing; relists run one at a time.",
	})

	// linkObjects is the number of objects watched in a cluster, by kind
	// (service, endpointslice, mirror, mcs-service, derived).
	linkObjects = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "link_objects",
		Help:      "Number of objects held from a cluster, by kind: Services exported by the export selector (service) and by a ServiceExport (mcs-service), their EndpointSlices, local mirror Services, local derived Services of ServiceImports (derived), the local mirrors' EndpointSlices in import mode (mirror-endpointslice).",
	}, []string{"cluster", "kind"})

	// programmingLatency is the time from a change in a cluster to the
	// index answering with it.
	programmingLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "programming_duration_seconds",
		Help:      "Time from an endpoint change (the EndpointSlice's last-change-trigger-time) to the index being updated.",
		// From 1 millisecond to ~17 minutes.
		Buckets:                     prometheus.ExponentialBuckets(0.001, 2, 20),
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	}, []string{"cluster"})
)

package watch

import (
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/mcmirror/mcmirror/internal/metric"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// log is the plugin's: its lines say plugin/mcmirror, whichever package
// writes them.
var log = clog.NewWithPlugin("mcmirror")

// Every label here has a handful of values: a cluster name, a kind of
// object. Never an address or a Service name.
var (
	metrics = metric.Set{Namespace: plugin.Namespace, Subsystem: "mcmirror"}

	linkSynced = metrics.Gauge("link_synced",
		"Whether the informers of a cluster (linked or local) have synced: 1 or 0.", "cluster")

	linkLastSync = metrics.Gauge("link_last_sync_timestamp_seconds",
		"Unix time of the last successful list or watch, watch event or watch bookmark of a cluster.", "cluster")

	linkUp = metrics.Gauge("link_up",
		"Whether the last list or watch of each kind of object of a cluster succeeded: 1 or 0. While 0, its last known state is answered (see link_withdrawn).",
		"cluster")

	linkErrors = metrics.Counter("link_errors_total",
		"Number of failed lists and watches against a cluster, by reason (unreachable, unauthorized, forbidden, error).",
		"cluster", "reason")

	linkWithdrawn = metrics.Gauge("link_withdrawn",
		"Whether the names of a linked cluster are withdrawn, its watches having failed for longer than stale_max_age: 1 or 0.",
		"cluster")

	relistsActive = metrics.Gauge1("relist_in_progress",
		"1 while a linked or local cluster relists (its watch could not resume), waiting for its turn or listing; relists run one at a time.")

	linkObjects = metrics.Gauge("link_objects",
		"Number of objects held from a cluster, by kind: Services exported by the export selector (service) and by a ServiceExport (mcs-service), their EndpointSlices, local mirror Services, local derived Services of ServiceImports (derived), the local mirrors' EndpointSlices in import mode (mirror-endpointslice).",
		"cluster", "kind")

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

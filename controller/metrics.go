package controller

import (
	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const (
	metricsNamespace = "coredns"
	metricsSubsystem = "mcmirror_controller"
)

var (
	// mirrorsGauge counts the mirror Services by remote cluster and kind
	// (service: <svc>-<cluster>; pod: <host>-<cluster>).
	mirrorsGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "mirrors",
		Help:      "Mirror Services the controller keeps, by remote cluster and kind (service, pod).",
	}, []string{"cluster", "kind"})

	// notMirroredGauge counts the exported Services that are not mirrored
	// (or not entirely), by remote cluster and reason (an Event reason).
	notMirroredGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "not_mirrored",
		Help:      "Exported Services not (or not entirely) mirrored, by remote cluster and reason.",
	}, []string{"cluster", "reason"})

	// syncsTotal counts syncs by result: success, error (retried) or
	// dropped (retries exhausted).
	syncsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "syncs_total",
		Help:      "Syncs of one exported Service, by result (success, error, dropped).",
	}, []string{"result"})

	// syncDuration is how long one sync takes, writes included.
	syncDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "sync_duration_seconds",
		Help:      "Duration of one sync.",
		Buckets:   prometheus.ExponentialBuckets(0.001, 2, 14),
	})

	// writesTotal counts API writes by verb and resource: a second sync
	// of unchanged state adds nothing.
	writesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "writes_total",
		Help:      "API writes, by verb (create, update, delete) and resource.",
	}, []string{"verb", "resource"})

	// writeErrorsTotal counts failed API writes by verb, resource and
	// the API's reason (Conflict, TooManyRequests, Invalid, ...): a write
	// that keeps failing shows here before the key is dropped.
	writeErrorsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "write_errors_total",
		Help:      "Failed API writes, by verb, resource and reason (the API status reason, Unknown when none).",
	}, []string{"verb", "resource", "reason"})

	// conflictsTotal counts the times a wanted name was found taken by an
	// object the controller does not own.
	conflictsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "conflicts_total",
		Help:      "Wanted names found taken by objects the controller does not own, by resource.",
	}, []string{"resource"})

	// portsAllocated and portsCapacity describe the egress port range.
	portsAllocated = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "egress_ports_allocated",
		Help:      "Egress ports allocated to mirror ports.",
	})
	portsCapacity = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "egress_ports_capacity",
		Help:      "Size of the egress port range.",
	})
	// portsExhaustedTotal counts allocations refused because the range was
	// full.
	portsExhaustedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "egress_ports_exhausted_total",
		Help:      "Egress port allocations refused because the range was full.",
	})

	// egressAddressesGauge is the number of gateway egress addresses the
	// mirrors' egress EndpointSlices list: 1 with --egress-address; with
	// --egress-service the ready addresses of that Service, or the last
	// known ones while it has none (0 only before any was ever known).
	egressAddressesGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "egress_addresses",
		Help:      "Gateway egress addresses the mirrors' egress EndpointSlices list.",
	})

	// linkRefusedTotal counts the link Secrets refused, by reason (a
	// link.Reason: exec, auth-provider, files, http, skip-tls-verify,
	// invalid, reserved, duplicate); every reason starts at zero.
	linkRefusedTotal = func() *prometheus.CounterVec {
		c := promauto.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "link_refused_total",
			Help:      "Link Secrets refused, by reason (exec, auth-provider, files, http, skip-tls-verify, invalid, reserved, duplicate).",
		}, []string{"reason"})
		for _, r := range link.Reasons {
			c.WithLabelValues(string(r))
		}
		return c
	}()

	// linksGauge is the number of linked clusters.
	linksGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "links",
		Help:      "Linked remote clusters.",
	})

	// linkUp is whether each link's lists and watches are answered (1)
	// or fail (0), and linkErrors counts their failures by reason
	// (unreachable, unauthorized, forbidden, error; each starts at 0).
	linkUp = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "link_up",
		Help:      "Whether the linked cluster's lists and watches are answered (1) or fail (0).",
	}, []string{"cluster"})
	linkErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "link_errors_total",
		Help:      "Failed lists and watches of a linked cluster, by reason (unreachable, unauthorized, forbidden, error).",
	}, []string{"cluster", "reason"})

	// linkSynced is whether each link's informers have listed (1), which
	// the imports it takes part in wait for, up to the start-up timeout.
	linkSynced = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "link_synced",
		Help:      "Whether the linked cluster's informers have synced (1) or not yet (0).",
	}, []string{"cluster"})
	// linkStartupTimeouts counts the start-up waits that ended before
	// their link synced: its imports went on without it.
	linkStartupTimeouts = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "link_startup_timeouts_total",
		Help:      "Links not synced within --link-startup-timeout: the imports they take part in went on without them.",
	}, []string{"cluster"})

	// importEndpointsRefused is the number of endpoints the imports
	// leave out now, by reason: the endpoint policy's (address,
	// denied_cidr, selectorless, unmanaged_slice, not_a_pod) and limit
	// (--max-import-endpoints); every reason starts at 0.
	importEndpointsRefused = func() *prometheus.GaugeVec {
		g := promauto.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "import_endpoints_refused",
			Help:      "Endpoints of the exporting clusters that the ServiceImports leave out now, by reason (address, denied_cidr, selectorless, unmanaged_slice, not_a_pod, limit).",
		}, []string{"reason"})
		for _, r := range importRefusedReasons {
			g.WithLabelValues(r)
		}
		return g
	}()
)

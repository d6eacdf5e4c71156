package controller

import (
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/metric"

	"github.com/prometheus/client_golang/prometheus"
)

var metrics = metric.Set{Namespace: "coredns", Subsystem: "mcmirror_controller"}

var (
	// mirrorsGauge: kind service is <svc>-<cluster>, pod <host>-<cluster>.
	mirrorsGauge = metrics.Gauge("mirrors",
		"Mirror Services the controller keeps, by remote cluster and kind (service, pod).", "cluster", "kind")
	// notMirroredGauge's reason is an Event reason.
	notMirroredGauge = metrics.Gauge("not_mirrored",
		"Exported Services not (or not entirely) mirrored, by remote cluster and reason.", "cluster", "reason")
	// syncsTotal: error is retried, dropped is retries exhausted.
	syncsTotal = metrics.Counter("syncs_total",
		"Syncs of one exported Service, by result (success, error, dropped).", "result")
	// syncDuration includes the writes.
	syncDuration = metrics.Histogram1("sync_duration_seconds", "Duration of one sync.",
		prometheus.ExponentialBuckets(0.001, 2, 14))
	// writesTotal: a second sync of unchanged state adds nothing.
	writesTotal = metrics.Counter("writes_total",
		"API writes, by verb (create, update, delete) and resource.", "verb", "resource")
	// writeErrorsTotal: a write that keeps failing shows here before the
	// key is dropped.
	writeErrorsTotal = metrics.Counter("write_errors_total",
		"Failed API writes, by verb, resource and reason (the API status reason, Unknown when none).",
		"verb", "resource", "reason")
	conflictsTotal = metrics.Counter("conflicts_total",
		"Wanted names found taken by objects the controller does not own, by resource.", "resource")

	portsAllocated      = metrics.Gauge1("egress_ports_allocated", "Egress ports allocated to mirror ports.")
	portsCapacity       = metrics.Gauge1("egress_ports_capacity", "Size of the egress port range.")
	portsExhaustedTotal = metrics.Counter1("egress_ports_exhausted_total",
		"Egress port allocations refused because the range was full.")

	// egressAddressesGauge is 1 with --egress-address; with
	// --egress-service the ready addresses of that Service, or the last
	// known ones while it has none (0 only before any was ever known).
	egressAddressesGauge = metrics.Gauge1("egress_addresses",
		"Gateway egress addresses the mirrors' egress EndpointSlices list.")

	// linkRefusedTotal: every reason (a link.Reason) starts at zero.
	linkRefusedTotal = withReasons(metrics.Counter("link_refused_total",
		"Link Secrets refused, by reason (exec, auth-provider, files, http, skip-tls-verify, invalid, reserved, duplicate).",
		"reason"), link.Reasons...)

	linksGauge = metrics.Gauge1("links", "Linked remote clusters.")
	linkUp     = metrics.Gauge("link_up",
		"Whether the linked cluster's lists and watches are answered (1) or fail (0).", "cluster")
	// linkErrors: each reason starts at 0.
	linkErrors = metrics.Counter("link_errors_total",
		"Failed lists and watches of a linked cluster, by reason (unreachable, unauthorized, forbidden, error).",
		"cluster", "reason")
	// linkSynced: the imports a link takes part in wait for it, up to the
	// start-up timeout.
	linkSynced = metrics.Gauge("link_synced",
		"Whether the linked cluster's informers have synced (1) or not yet (0).", "cluster")
	linkStartupTimeouts = metrics.Counter("link_startup_timeouts_total",
		"Links not synced within --link-startup-timeout: the imports they take part in went on without them.",
		"cluster")

	// importEndpointsRefused: every reason starts at 0; limit is
	// --max-import-endpoints, the others the endpoint policy's.
	importEndpointsRefused = withReasons(metrics.Gauge("import_endpoints_refused",
		"Endpoints of the exporting clusters that the ServiceImports leave out now, by reason "+
			"(address, denied_cidr, selectorless, unmanaged_slice, not_a_pod, limit).", "reason"),
		importRefusedReasons...)
)

// withReasons starts every reason of v at zero.
func withReasons[V interface{ WithLabelValues(...string) M }, M any, R ~string](v V, reasons ...R) V {
	for _, r := range reasons {
		v.WithLabelValues(string(r))
	}
	return v
}

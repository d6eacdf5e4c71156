package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcmirror/mcmirror/internal/metric"
)

// DirectionEgress labels what the egress carries out to a peer;
// DirectionIngress what the ingress takes in from one.
const (
	DirectionEgress  = "egress"
	DirectionIngress = "ingress"
)

// Labels have a handful of values each: a peer cluster, a direction, a
// refusal reason. Never an address, a port or a Service name.
var metrics = metric.Set{Namespace: "coredns", Subsystem: "mcmirror_gateway"}

var (
	connsOpen = metrics.Gauge("connections_open",
		"Proxied connections open now, by peer cluster and direction.", "peer", "direction")
	connsTotal = metrics.Counter("connections_total",
		"Proxied connections established, by peer cluster and direction.", "peer", "direction")
	bytesTotal = metrics.Counter("bytes_total",
		"Payload bytes proxied, by peer cluster, direction and way (sent towards the target, received from it).",
		"peer", "direction", "way")
	// refusalsTotal's reasons are in README.md.
	refusalsTotal = metrics.Counter("refusals_total",
		"Connections refused, by peer cluster, direction and reason.", "peer", "direction", "reason")
	dialErrorsTotal = metrics.Counter("dial_errors_total",
		"Failed dials, by peer cluster and direction: to the target on ingress, to the peer's ingress on egress.",
		"peer", "direction")
	handshakeFailures = metrics.Counter("tls_handshake_failures_total",
		"Failed TLS handshakes, by direction (ingress: a client; egress: a peer's ingress).", "direction")
	// acceptErrors that are not temporary end the listener.
	acceptErrors = metrics.Counter("accept_errors_total",
		"Failed accepts of a listener, by direction (ingress: the mTLS port; egress: an egress port); temporary ones (out of file descriptors) are retried.",
		"direction")
	dialRetries = metrics.Counter("dial_retries_total",
		"Connections to a peer's ingress tried a second time after the first was refused or reset before it answered, by peer cluster.",
		"peer")
	certExpiry = metrics.Gauge1("certificate_expiry_timestamp_seconds",
		"Unix time at which the gateway's certificate expires.")
	certReloads = metrics.Counter("certificate_reloads_total",
		"Certificate, key and trust root reloads from their files, by result (success, error).", "result")
	egressListeners = metrics.Gauge1("egress_ports", "Egress ports listened on.")
	egressConflicts = metrics.Gauge1("egress_port_conflicts",
		"Egress ports claimed by more than one mirror Service; the first claim is served (gateway/routes.go).")
	exportedServices = metrics.Gauge1("ingress_exported_services",
		"Exported Services the ingress knows (by --export-selector or a ServiceExport), each once; only those in gateway mode are dialed.")
	peerAlive = metrics.Gauge("alive",
		"Whether the gateway of a linked cluster answers its probe: 1 or 0.", "cluster")
	probeLatency = metrics.Histogram("probe_latency_seconds",
		"Round trip of a successful probe of a linked cluster's gateway (TLS handshake included).",
		prometheus.ExponentialBuckets(0.0005, 2, 14), "cluster")
	probesTotal = metrics.Counter("probes_total",
		"Probes of linked clusters' gateways, by cluster and result (success, failure).", "cluster", "result")
)

// The copy buffers' budget (budget.go).
var (
	bufReserved = metrics.Gauge1("copy_buffer_bytes_reserved",
		"Bytes of grown copy buffers (16 KB and 256 KB) held by streams now, ingress and egress together; at most copy_buffer_budget_bytes.")
	bufBudgetBytes = metrics.Gauge1("copy_buffer_budget_bytes",
		"Budget of grown copy buffers (--buffer-budget; default a quarter of the container's memory limit).")
	bufGrowsRefused = metrics.Counter1("copy_buffer_grows_refused_total",
		"Copy buffers not grown because the budget was spent; the stream went on with its smaller buffer.")
)

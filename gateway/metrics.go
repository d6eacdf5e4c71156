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
var m = metric.Set{Namespace: "coredns", Subsystem: "mcmirror_gateway"}

var (
	connsOpen = m.Gauge("connections_open",
		"Proxied connections open now, by peer cluster and direction.", "peer", "direction")
	connsTotal = m.Counter("connections_total",
		"Proxied connections established, by peer cluster and direction.", "peer", "direction")
	bytesTotal = m.Counter("bytes_total",
		"Payload bytes proxied, by peer cluster, direction and way (sent towards the target, received from it).",
		"peer", "direction", "way")
	// refusalsTotal's reasons are in README.md.
	refusalsTotal = m.Counter("refusals_total",
		"Connections refused, by peer cluster, direction and reason.", "peer", "direction", "reason")
	dialErrorsTotal = m.Counter("dial_errors_total",
		"Failed dials, by peer cluster and direction: to the target on ingress, to the peer's ingress on egress.",
		"peer", "direction")
	handshakeFailures = m.Counter("tls_handshake_failures_total",
		"Failed TLS handshakes, by direction (ingress: a client; egress: a peer's ingress).", "direction")
	// acceptErrors that are not temporary end the listener.
	acceptErrors = m.Counter("accept_errors_total",
		"Failed accepts of a listener, by direction (ingress: the mTLS port; egress: an egress port); temporary ones (out of file descriptors) are retried.",
		"direction")
	dialRetries = m.Counter("dial_retries_total",
		"Connections to a peer's ingress tried a second time after the first was refused or reset before it answered, by peer cluster.",
		"peer")
	certExpiry = m.Gauge1("certificate_expiry_timestamp_seconds",
		"Unix time at which the gateway's certificate expires.")
	certReloads = m.Counter("certificate_reloads_total",
		"Certificate, key and trust root reloads from their files, by result (success, error).", "result")
	egressListeners = m.Gauge1("egress_ports", "Egress ports listened on.")
	egressConflicts = m.Gauge1("egress_port_conflicts",
		"Egress ports claimed by more than one mirror Service; the first claim is served (gateway/routes.go).")
	exportedServices = m.Gauge1("ingress_exported_services",
		"Exported Services the ingress knows (by --export-selector or a ServiceExport), each once; only those in gateway mode are dialed.")
	peerAlive = m.Gauge("alive",
		"Whether the gateway of a linked cluster answers its probe: 1 or 0.", "cluster")
	probeLatency = m.Histogram("probe_latency_seconds",
		"Round trip of a successful probe of a linked cluster's gateway (TLS handshake included).",
		prometheus.ExponentialBuckets(0.0005, 2, 14), "cluster")
	probesTotal = m.Counter("probes_total",
		"Probes of linked clusters' gateways, by cluster and result (success, failure).", "cluster", "result")
)

// The copy buffers' budget (budget.go).
var (
	bufReserved = m.Gauge1("copy_buffer_bytes_reserved",
		"Bytes of grown copy buffers (16 KB and 256 KB) held by streams now, ingress and egress together; at most copy_buffer_budget_bytes.")
	bufBudgetBytes = m.Gauge1("copy_buffer_budget_bytes",
		"Budget of grown copy buffers (--buffer-budget; default a quarter of the container's memory limit).")
	bufGrowsRefused = m.Counter1("copy_buffer_grows_refused_total",
		"Copy buffers not grown because the budget was spent; the stream went on with its smaller buffer.")
)

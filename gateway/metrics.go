package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Labels have a handful of values each: a peer cluster, a direction, a
// refusal reason. Never an address, a port or a Service name.
const (
	namespace = "coredns"
	subsystem = "mcmirror_gateway"

	// DirectionEgress labels what the egress carries out to a peer;
	// DirectionIngress what the ingress takes in from one.
	DirectionEgress  = "egress"
	DirectionIngress = "ingress"
)

var (
	// connsOpen is the number of proxied connections now open.
	connsOpen = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "connections_open",
		Help: "Proxied connections open now, by peer cluster and direction.",
	}, []string{"peer", "direction"})

	// connsTotal counts proxied connections that reached their target.
	connsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "connections_total",
		Help: "Proxied connections established, by peer cluster and direction.",
	}, []string{"peer", "direction"})

	// bytesTotal counts payload bytes copied; "sent" is towards the
	// target of the direction, "received" back from it.
	bytesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "bytes_total",
		Help: "Payload bytes proxied, by peer cluster, direction and way (sent towards the target, received from it).",
	}, []string{"peer", "direction", "way"})

	// refusalsTotal counts destinations the ingress refused, and
	// connections the egress could not carry, by reason (README.md).
	refusalsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "refusals_total",
		Help: "Connections refused, by peer cluster, direction and reason.",
	}, []string{"peer", "direction", "reason"})

	// dialErrorsTotal counts failed dials: the target (ingress) or the
	// peer's ingress (egress).
	dialErrorsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "dial_errors_total",
		Help: "Failed dials, by peer cluster and direction: to the target on ingress, to the peer's ingress on egress.",
	}, []string{"peer", "direction"})

	// handshakeFailures counts TLS handshakes that failed.
	handshakeFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "tls_handshake_failures_total",
		Help: "Failed TLS handshakes, by direction (ingress: a client; egress: a peer's ingress).",
	}, []string{"direction"})

	// acceptErrors counts failed accepts: temporary ones (out of file
	// descriptors) are retried, others end the listener.
	acceptErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "accept_errors_total",
		Help: "Failed accepts of a listener, by direction (ingress: the mTLS port; egress: an egress port); temporary ones (out of file descriptors) are retried.",
	}, []string{"direction"})

	// dialRetries counts the egress's second tries of a peer's ingress
	// that refused or reset its first connection.
	dialRetries = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "dial_retries_total",
		Help: "Connections to a peer's ingress tried a second time after the first was refused or reset before it answered, by peer cluster.",
	}, []string{"peer"})

	// certExpiry is when the gateway's own certificate expires.
	certExpiry = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the gateway's certificate expires.",
	})

	// certReloads counts certificate reloads by result.
	certReloads = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "certificate_reloads_total",
		Help: "Certificate, key and trust root reloads from their files, by result (success, error).",
	}, []string{"result"})

	// egressListeners is the number of egress ports listened on.
	egressListeners = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "egress_ports",
		Help: "Egress ports listened on.",
	})

	// egressConflicts is the number of egress ports recorded by more than
	// one mirror; the first claim is served.
	egressConflicts = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "egress_port_conflicts",
		Help: "Egress ports claimed by more than one mirror Service; the first claim is served (gateway/routes.go).",
	})

	// exportedServices is the number of exported Services the ingress
	// allows.
	exportedServices = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "ingress_exported_services",
		Help: "Exported Services the ingress knows (by --export-selector or a ServiceExport), each once; only those in gateway mode are dialed.",
	})

	// peerAlive is 1 while the last probes of a peer's ingress succeed.
	peerAlive = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "alive",
		Help: "Whether the gateway of a linked cluster answers its probe: 1 or 0.",
	}, []string{"cluster"})

	// probeLatency is the round trip of successful probes.
	probeLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:    "probe_latency_seconds",
		Help:    "Round trip of a successful probe of a linked cluster's gateway (TLS handshake included).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}, []string{"cluster"})

	// probesTotal counts probes by result.
	probesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "probes_total",
		Help: "Probes of linked clusters' gateways, by cluster and result (success, failure).",
	}, []string{"cluster", "result"})
)

var (
	// bufReserved is what grown copy buffers hold now (budget.go).
	bufReserved = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "copy_buffer_bytes_reserved",
		Help: "Bytes of grown copy buffers (16 KB and 256 KB) held by streams now, ingress and egress together; at most copy_buffer_budget_bytes.",
	})

	// bufBudgetBytes is the bound on bufReserved (--buffer-budget).
	bufBudgetBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "copy_buffer_budget_bytes",
		Help: "Budget of grown copy buffers (--buffer-budget; default a quarter of the container's memory limit).",
	})

	// bufGrowsRefused counts grows refused for want of budget: the
	// direction went on with the buffer it had.
	bufGrowsRefused = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "copy_buffer_grows_refused_total",
		Help: "Copy buffers not grown because the budget was spent; the stream went on with its smaller buffer.",
	})
)

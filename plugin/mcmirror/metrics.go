package mcmirror

import (
	"github.com/coredns/coredns/plugin"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Every label here has a handful of values: a cluster name, a name kind, an
// rcode, a record type. Never an address or a Service name.
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
		Help:      "Number of objects held from a cluster, by kind: Services exported by the export selector (service) and by a ServiceExport (mcs-service), their EndpointSlices, local mirror Services, local derived Services of ServiceImports (derived).",
	}, []string{"cluster", "kind"})

	// replyErrors counts the replies that could not be written.
	replyErrors = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "reply_errors_total",
		Help:      "Number of replies the server could not write (a reply that does not pack); the client gets SERVFAIL.",
	})

	// answers counts answers by name kind and rcode.
	answers = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "answers_total",
		Help:      "Number of answers given, by name kind (cluster, pod, global, srv, ptr; clusterset, clusterset-pod, clusterset-zone in the clusterset zones) and rcode.",
	}, []string{"kind", "rcode"})

	// gatewayAlive is whether a linked cluster's gateway is alive as the
	// plugin sees it (gateway_health): what decides whether its
	// gateway-mode members are in -global answers. Not the gateway's own
	// coredns_mcmirror_gateway_alive, which the same binary registers.
	gatewayAlive = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "gateway_health_alive",
		Help:      "Whether the gateway of a linked cluster counts as alive for -global answers: 1 or 0.",
	}, []string{"cluster"})

	// gatewayHealthErrors counts reads of the gateway_health URL that
	// failed or answered something else than peer states.
	gatewayHealthErrors = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "mcmirror",
		Name:      "gateway_health_errors_total",
		Help:      "Number of failed or unusable reads of the gateway_health URL.",
	})

	// linkRefused counts the link Secrets refused, by reason: a kubeconfig
	// feature not allowed (exec, auth-provider, files, http,
	// skip-tls-verify), or invalid, reserved, duplicate (link.Reason).
	linkRefused = func() *prometheus.CounterVec {
		c := promauto.NewCounterVec(prometheus.CounterOpts{
			Namespace: plugin.Namespace,
			Subsystem: "mcmirror",
			Name:      "link_refused_total",
			Help:      "Number of link Secrets refused, by reason (exec, auth-provider, files, http, skip-tls-verify, invalid, reserved, duplicate).",
		}, []string{"reason"})
		for _, r := range link.Reasons {
			c.WithLabelValues(string(r))
		}
		return c
	}()

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

// answerRcodes are the rcodes the plugin answers with, in the order of
// answerCounters' second index.
var answerRcodes = [...]int{dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure}

// answerCounters are the answers counters, resolved once so that counting
// an answer is one atomic add: no label hashing on the hot path.
var answerCounters = func() (c [index.NumKinds][len(answerRcodes)]prometheus.Counter) {
	for k := range index.NumKinds {
		for i, rc := range answerRcodes {
			c[k][i] = answers.WithLabelValues(k.String(), dns.RcodeToString[rc])
		}
	}
	return c
}()

func countAnswer(kind index.Kind, rcode int) {
	for i, rc := range answerRcodes {
		if rc == rcode {
			answerCounters[kind][i].Inc()
			return
		}
	}
}

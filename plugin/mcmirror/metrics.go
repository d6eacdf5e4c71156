package mcmirror

import (
	"github.com/coredns/coredns/plugin"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/metric"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Every label here has a handful of values: a cluster name, a name kind, an
// rcode, a record type. Never an address or a Service name.
var (
	metrics = metric.Set{Namespace: plugin.Namespace, Subsystem: "mcmirror"}

	replyErrors = metrics.Counter1("reply_errors_total",
		"Number of replies the server could not write (a reply that does not pack); the client gets SERVFAIL.")

	answers = metrics.Counter("answers_total",
		"Number of answers given, by name kind (cluster, pod, global, srv, ptr; clusterset, clusterset-pod, clusterset-zone in the clusterset zones) and rcode.",
		"kind", "rcode")

	// gatewayAlive is what decides whether a linked cluster's gateway-mode
	// members are in -global answers. Not the gateway's own
	// coredns_mcmirror_gateway_alive, which the same binary registers.
	gatewayAlive = metrics.Gauge("gateway_health_alive",
		"Whether the gateway of a linked cluster counts as alive for -global answers: 1 or 0.", "cluster")

	gatewayHealthErrors = metrics.Counter1("gateway_health_errors_total",
		"Number of failed or unusable reads of the gateway_health URL.")

	// linkRefused has a series for every reason (link.Reasons) from the start.
	linkRefused = func() *prometheus.CounterVec {
		c := metrics.Counter("link_refused_total",
			"Number of link Secrets refused, by reason (exec, auth-provider, files, http, skip-tls-verify, invalid, reserved, duplicate).",
			"reason")
		for _, r := range link.Reasons {
			c.WithLabelValues(string(r))
		}
		return c
	}()
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

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

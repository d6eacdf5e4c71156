package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The metrics of what the gateway refuses to believe: claims on egress
// ports, endpoints, and streams whose export was withdrawn (README.md,
// "Trust").
var (
	// egressClaimsIgnored is the number of claims on egress ports (one per
	// TCP entry of a mcmirror.dev/egress-ports annotation) ignored now.
	egressClaimsIgnored = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "egress_claims_ignored",
		Help: "Claims on egress ports in mirror Services' mcmirror.dev/egress-ports annotations that are ignored, by reason (deleting, incomplete, name_mismatch, flat_mirror, out_of_range).",
	}, []string{"reason"})

	// endpointsRefused counts endpoints of exported Services that a
	// destination's resolution passed over, by reason.
	endpointsRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "ingress_endpoints_refused_total",
		Help: "Endpoints of exported Services the ingress would not dial, counted at each resolution, by reason (address, denied_cidr, selectorless, unmanaged_slice, not_a_pod).",
	}, []string{"reason"})

	// streamsEnded counts established ingress streams ended because what
	// allowed them was withdrawn.
	streamsEnded = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "ingress_streams_ended_total",
		Help: "Established ingress streams ended because their export, their endpoint or their cluster's place in the allow-list was withdrawn, by peer cluster and reason (not_exported, endpoint_gone, cluster_not_allowed).",
	}, []string{"peer", "reason"})
)

package gateway

// The metrics of what the gateway refuses to believe: claims on egress
// ports, endpoints, and streams whose export was withdrawn (README.md,
// "Trust").
var (
	// egressClaimsIgnored counts one claim per TCP entry of an annotation.
	egressClaimsIgnored = metrics.Gauge("egress_claims_ignored",
		"Claims on egress ports in mirror Services' mcmirror.dev/egress-ports annotations that are ignored, by reason (deleting, incomplete, name_mismatch, flat_mirror, out_of_range).",
		"reason")
	endpointsRefused = metrics.Counter("ingress_endpoints_refused_total",
		"Endpoints of exported Services the ingress would not dial, counted at each resolution, by reason (address, denied_cidr, selectorless, unmanaged_slice, not_a_pod).",
		"reason")
	streamsEnded = metrics.Counter("ingress_streams_ended_total",
		"Established ingress streams ended because their export, their endpoint or their cluster's place in the allow-list was withdrawn, by peer cluster and reason (not_exported, endpoint_gone, cluster_not_allowed).",
		"peer", "reason")
)

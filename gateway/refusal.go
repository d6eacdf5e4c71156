package gateway

import "net/http"

// Reason says why a connection was not carried. Each is a value of the
// refusals_total metric's reason label, logged, and (ingress) answered with
// an HTTP status, so that the egress, and whoever reads its logs, knows which
// it was. README.md lists them.
type Reason string

const (
	// Ingress: what the CONNECT request asked for.
	ReasonBadRequest     Reason = "bad_request"     // not a CONNECT or a probe, or a malformed one
	ReasonAddressLiteral Reason = "address_literal" // an IP address, not a name
	ReasonHeaderTooLarge Reason = "header_too_large"
	ReasonHeaderTimeout  Reason = "header_timeout" // the request did not arrive in time
	ReasonNotExported    Reason = "not_exported"   // no such Service, or not exported in gateway mode
	ReasonPortNotExposed Reason = "port_not_exported"
	ReasonPodNotExported Reason = "pod_not_exported" // the Service is not headless, or has no such pod
	ReasonNoEndpoint     Reason = "no_ready_endpoint"
	// ReasonNotSynced: the ingress has not read its cluster's exported
	// Services yet (it has just started), and cannot tell.
	ReasonNotSynced  Reason = "not_synced"
	ReasonDialFailed Reason = "dial_failed"
	ReasonTooMany    Reason = "too_many_connections"
	// ReasonTooManyFromPeer: the peer cluster holds
	// Ingress.MaxConnsPerPeer streams already.
	ReasonTooManyFromPeer Reason = "too_many_from_peer"
	// ReasonEvicted: still in its handshake or request when every place
	// was taken, and the oldest such; closed for a newer connection.
	ReasonEvicted Reason = "handshake_evicted"
	// ReasonClusterNotAllowed: the client certificate names a cluster that
	// is not allowed to connect (Ingress.AllowClusters).
	ReasonClusterNotAllowed Reason = "cluster_not_allowed"
	// ReasonIssuerMismatch: the client certificate chains to the root,
	// but not through the intermediate of the cluster it names (another
	// cluster's, none, or more than one; trust.AcceptedChain). Refused in the
	// handshake, so answered with no status; the peer label is the
	// cluster whose intermediate issued it.
	ReasonIssuerMismatch Reason = "issuer_mismatch"

	// Egress: why a client's connection was reset.
	ReasonNoRoute     Reason = "no_route"     // the port is not (or no longer) a mirror's, or recorded twice
	ReasonUnknownPeer Reason = "unknown_peer" // no ingress address for the mirror's cluster
	ReasonPeerRefused Reason = "peer_refused" // the peer's ingress answered with an error status
	ReasonHandshake   Reason = "handshake_failed"
	// ReasonTooManyFromSource: the client's address holds
	// Egress.MaxConnsPerSource connections already.
	ReasonTooManyFromSource Reason = "too_many_from_source"
)

// status is the HTTP status the ingress answers a refusal with.
func (r Reason) status() int {
	switch r {
	case ReasonBadRequest, ReasonAddressLiteral:
		return http.StatusBadRequest
	case ReasonHeaderTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case ReasonHeaderTimeout:
		return http.StatusRequestTimeout
	case ReasonNotExported, ReasonPortNotExposed, ReasonPodNotExported, ReasonClusterNotAllowed:
		return http.StatusForbidden
	case ReasonNoEndpoint, ReasonTooMany, ReasonTooManyFromPeer, ReasonNotSynced:
		return http.StatusServiceUnavailable
	case ReasonDialFailed:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

package gateway

import "github.com/mcmirror/mcmirror/internal/endpointpolicy"

// EndpointPolicy says which endpoints of an exported Service the ingress
// may dial: by default only Pods of the Service's namespace listed by the
// EndpointSlice controller, selector-less Services only when opted in,
// never a loopback, link-local, unspecified, multicast or broadcast
// address nor one in Deny. The rule is internal/endpointpolicy's, which
// the controller's flat-mode imports apply too; its reasons are the
// values of the ingress_endpoints_refused_total metric's reason label.
type EndpointPolicy = endpointpolicy.Policy

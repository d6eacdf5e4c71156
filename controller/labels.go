package controller

import "github.com/mcmirror/mcmirror/internal/labels"

// Keys of the controller's own metadata, under the project's domain. They
// live in internal/labels, which the DNS plugin and the gateway read too;
// the Linkerd-compatible keys (mirrored-service, cluster-name,
// headless-mirror-svc-name, remote-resource-version) are there as well.
const (
	ManagedBy              = labels.ManagedBy
	ManagedByValue         = labels.ManagedByValue
	RemoteService          = labels.RemoteService
	Mode                   = labels.ModeLabel
	ModeGateway            = labels.ModeGateway
	ModeFlat               = labels.ModeFlat
	RemoteHostname         = labels.RemoteHostname
	EgressPorts            = labels.EgressPorts
	RemoteHeadless         = labels.RemoteHeadless
	EndpointSliceManagedBy = labels.EndpointSliceManagedBy
)

// Package gateway_test proves `coredns-mc gateway` end to end with real
// processes and real sockets: cluster west exports Services whose endpoints
// are real servers in network namespaces (harness.RunPod), the real
// `coredns-mc controller` mirrors them in cluster east, east's gateway
// (egress) listens on the egress ports recorded on the mirrors and carries
// each connection over mTLS to west's gateway (ingress), which dials a ready
// endpoint. A client connects to 127.0.0.1:<egress port> and gets the
// greeting of the pod it reached.
package gateway_test

import (
	"os"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
)

// Neither cluster runs kube-controller-manager: west's Services are
// selector-less and their EndpointSlices are written by the tests, with the
// addresses of the pods RunPod starts.
var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"}, {Name: "west"},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	// wait bounds what the control plane does (mirrors made, informers
	// synced); the gateway's own promises have tighter bounds, given where
	// they are checked.
	wait = 60 * time.Second
	tick = 50 * time.Millisecond

	// egressAddress is what the controller writes into the mirrors'
	// EndpointSlices. Nothing routes to it here: clients connect to the
	// egress port on 127.0.0.1, where east's gateway binds its egress ports.
	egressAddress = harness.EgressAddress

	// podPort is where the echo pods listen; servicePort is the Service
	// port, mapped to podPort by the port's name, as kube-proxy does.
	podPort     = 8080
	servicePort = 80
	portName    = "http"
)

// fleet is one test's set of processes: east's controller linked to west,
// west's gateway (ingress) and east's gateway (egress, peer west). Each
// test starts its own rather than one harness.LaunchFleet for the package:
// the tests stop and restart gateways, give west's ingress flags of their
// own, and need no data plane (clients connect to the egress ports on
// 127.0.0.1), which a fleet's parts, run in the nodes, would need.
type fleet struct {
	controller *harness.Process
	west, east *harness.Gateway
}

// startFleet starts the gateways and the controller for the test t. The
// controller gets a range of egress ports of its own, so that no two tests
// (or a mirror a previous test left in east) share a port.
func startFleet(t *testing.T, westArgs ...string) *fleet {
	t.Helper()
	east, west := env.Cluster("east"), env.Cluster("west")
	tls := env.GatewayTLS(t, "east", "west")
	f := &fleet{}
	// West's Services are selector-less, their slices written by the tests
	// (no kube-controller-manager runs here): opted in, as an operator does.
	f.west = env.StartGateway(t, west, harness.GatewayOptions{TLS: tls["west"], Ingress: true,
		Args: append([]string{"--allow-selectorless", "*"}, westArgs...)})
	f.east = env.StartGateway(t, east, harness.GatewayOptions{TLS: tls["east"], Egress: true,
		Peers: map[string]string{"west": f.west.IngressAddr}})
	f.controller = startController(t)
	return f
}

// startController starts `coredns-mc controller` for east, linked to west
// with the read-only credentials of deploy/remote-link.yaml, with a window
// of egress ports of its own.
func startController(t *testing.T) *harness.Process {
	t.Helper()
	return env.StartController(t, env.Cluster("east"), harness.ControllerOptions{
		Remotes:       []*harness.Cluster{env.Cluster("west")},
		EgressAddress: egressAddress,
		EgressPorts:   harness.PortRange(harness.EgressPortWindow()),
	}).Process
}

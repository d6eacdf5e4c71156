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

	// podPort is where the echo pods listen; servicePort is the Service
	// port, mapped to podPort by the port's name, as kube-proxy does.
	podPort     = 8080
	servicePort = 80
	portName    = "http"
)

// fleet is what each test starts for itself, rather than one fleet for the
// package: east's controller linked to west, west's gateway (ingress) with
// westArgs and east's gateway (egress), on 127.0.0.1, with a window of
// egress ports of their own, so that no two tests (nor a mirror a test
// before left in east) share a port. The tests stop and restart gateways
// and give west's ingress flags of their own.
func fleet(westArgs ...string) harness.FleetOptions {
	return harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetController | harness.FleetGateways,
		EgressPorts: harness.EgressPortWindow().String(),
		// West's Services are selector-less, their slices written by the
		// tests (no kube-controller-manager runs here): opted in, as an
		// operator does.
		IngressArgs: append([]string{"--allow-selectorless", "*"}, westArgs...)}
}

// startFleet starts fleet(westArgs...) for the test t, and has t print
// the environment's logs if it fails.
func startFleet(t *testing.T, westArgs ...string) *harness.Fleet {
	t.Helper()
	env.LogOnFailure(t)
	return env.StartFleet(t, fleet(westArgs...))
}

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
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
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
	egressAddress = "192.0.2.10"

	// podPort is where the echo pods listen; servicePort is the Service
	// port, mapped to podPort by the port's name, as kube-proxy does.
	podPort     = 8080
	servicePort = 80
	portName    = "http"
)

// fleet is one test's set of processes: east's controller linked to west,
// west's gateway (ingress) and east's gateway (egress, peer west).
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
	tls := gatewayTLS(t)
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
// with the read-only credentials of deploy/remote-link.yaml.
func startController(t *testing.T) *harness.Process {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	return env.StartProcess(t, "east/controller", nil, bin, "controller",
		"--kubeconfig", env.Cluster("east").Kubeconfig,
		"--cluster", "east",
		"--link", "west="+linkKubeconfig(t),
		"--egress-address", egressAddress,
		"--egress-ports", egressPortRange(),
		"--metrics-addr", "",
		"--v", "2",
	)
}

// linkKubeconfig returns the path of a kubeconfig for west with the
// credentials a link uses.
func linkKubeconfig(t *testing.T) string {
	t.Helper()
	p, err := env.Cluster("west").LinkKubeconfigFile(context.Background())
	require.NoError(t, err)
	return p
}

var (
	caOnce sync.Once
	ca     *gatewaytest.CA
	caErr  error
)

// gatewayTLS issues east's and west's gateway certificates, from one trust
// root for the package, into a directory of the test.
func gatewayTLS(t *testing.T) map[string]gatewaytest.Files {
	t.Helper()
	caOnce.Do(func() { ca, caErr = gatewaytest.NewCA("mcmirror e2e gateways") })
	require.NoError(t, caErr)
	dir := t.TempDir()
	out := map[string]gatewaytest.Files{}
	for _, c := range []string{"east", "west"} {
		f, err := ca.IssueFiles(dir, c, gatewaytest.Options{})
		require.NoError(t, err)
		out[c] = f
	}
	return out
}

// Egress port windows: 100 ports each, below the kernel's ephemeral range
// (32768 and up), at a random offset per run so that parallel runs rarely
// meet.
var (
	portBase   = 20000 + 100*rand.IntN(100)
	portWindow atomic.Int32
)

func egressPortRange() string {
	i := int(portWindow.Add(1) - 1)
	lo := 20000 + (portBase-20000+100*i)%10000
	return fmt.Sprintf("%d-%d", lo, lo+99)
}

var nsSeq atomic.Int32

// namespace returns a namespace name unique in this run (tests may run
// more than once with -count) and creates it in east and west.
func namespace(t *testing.T, base string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", base, nsSeq.Add(1))
	for _, c := range env.Clusters() {
		require.NoError(t, c.Apply(context.Background(), harness.Namespace(ns)))
	}
	return ns
}

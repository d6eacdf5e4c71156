// Package walkthrough_test is the walkthrough a user follows, with real
// bytes: three clusters, east, west and paris, each with a data plane (a
// node namespace with kube-proxy, pods that run servers), StatefulSet
// nginx-set exported from each, and for east the real `coredns-mc`
// processes: the cluster DNS, the mirror controller and the gateway (and
// west's and paris's gateways). From a client pod in east, `curl` and a Go
// client reach remote pods and Services by name, through the system
// resolver, the cluster DNS, kube-proxy and, in gateway mode, the gateways;
// in flat mode straight over routed pod IPs.
package walkthrough_test

import (
	"os"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", DataPlane: true, MCS: true},
	{Name: "west", DataPlane: true, MCS: true},
	{Name: "paris", DataPlane: true, MCS: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	// wait bounds convergence: mirrors made, kube-proxy programmed, DNS
	// answering, gateways probing.
	wait = 90 * time.Second
	tick = 250 * time.Millisecond

	replicas = 3
	echoPort = 7
)

// remotes are the clusters east links to.
var remotes = []string{"west", "paris"}

package walkthrough_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// mode is one way of exporting: the namespace the walkthrough's
// StatefulSets live in for it, and the export label's value.
type mode struct {
	name   string
	ns     string
	export string
	// flat: pod IPs are routed between the clusters' nodes. Without it
	// (gateway mode) the nodes reach each other and nothing else.
	flat bool
}

var (
	gatewayMode = mode{name: "gateway", ns: "default", export: labels.ExportGateway}
	flatMode    = mode{name: "flat", ns: "flat", export: labels.ExportFlat, flat: true}
)

// startFleet exports nginx-set from every cluster in both modes'
// namespaces, puts a client pod in east, and starts east's controller and
// gateway and west's and paris's gateways, for the test t. The controller
// writes what either DNS source reads (--mirror-flat-endpoints).
func startFleet(t *testing.T) *harness.Fleet {
	t.Helper()
	ctx := context.Background()
	east := env.Cluster("east")
	for _, c := range env.Clusters() {
		for _, m := range []mode{gatewayMode, flatMode} {
			require.NoError(t, c.Apply(ctx, harness.Namespace(m.ns)+nginx(m, replicas)+web(m)))
		}
	}
	require.NoError(t, east.Apply(ctx, harness.ClientPod("default", "client")))
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: remotes, Parts: harness.FleetController | harness.FleetGateways,
		Controller: harness.ControllerOptions{Args: []string{"--mirror-flat-endpoints"}}})
}

// startDNS starts east's cluster DNS for the test t, reading the linked
// clusters' exports from source ("direct": watching each of them;
// "import": from the mirrors east's controller writes), and leaving out the
// members of clusters east's gateway cannot reach, as the chart's DNS does.
func startDNS(t *testing.T, fleet *harness.Fleet, source string) *harness.DNSServer {
	t.Helper()
	o := harness.FleetOptions{Local: "east", Parts: harness.FleetDNS, Block: []string{"gateway_health " + fleet.Gateways["east"].MetricsURL + "/peers"}}
	if source == "import" {
		o.Block = append(o.Block, "source import")
	} else {
		o.Remotes = remotes
	}
	return env.StartFleet(t, o).DNS
}

// web is a ClusterIP Service in front of nginx-set's pods, exported in
// mode m: every cluster's web makes one ServiceImport, whose ClusterSetIP
// reaches them all.
func web(m mode) string {
	return fmt.Sprintf(`
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %s, labels: {%s: %q}}
spec:
  selector: {app: nginx-svc}
  ports: [{name: http, port: 80}]
`, m.ns, labels.Exported, m.export)
}

// nginx is the walkthrough's StatefulSet for mode m: nginx-set behind
// headless nginx-svc, HTTP on port 80 and a TCP echo on port 7.
func nginx(m mode, n int) string {
	return harness.StatefulSetWithPorts(m.ns, "nginx-svc", "nginx-set", n,
		map[string]string{labels.Exported: m.export},
		harness.ContainerPort{Name: "http", Port: 80}, harness.ContainerPort{Name: "echo", Port: echoPort})
}

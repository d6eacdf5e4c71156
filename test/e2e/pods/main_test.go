// Package pods runs mcmirror as a user installs it, on clusters with real
// nodes: the project's image in containerd, the manifests of deploy/
// applied with kubectl as the Install section of the README says, pods
// whose probes, volumes and securityContext the kubelet enforces, and a
// client pod that reaches StatefulSet pods of another cluster by name.
// mcmirror runs here as the pods deploy/ and the chart make, not as a
// harness fleet's processes.
package pods

import (
	"os"
	"testing"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", RealNode: true},
	{Name: "west", RealNode: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

package controller_test

import (
	"fmt"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A linked cluster that cannot be reached delays no other, and its mirrors
// (the last known state) are kept, not swept.
func TestUnreachableLink(t *testing.T) {
	const ns = "e2e-unreachable"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")

	path := deadKubeconfig(t)

	// A mirror of dead's, as a previous run left it.
	require.NoError(t, east.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: api-dead
  namespace: %s
  labels: {%q: "true", %q: dead, %q: %q, %q: api}
spec: {ports: [{name: http, port: 80}]}
`, ns, labels.MirroredService, labels.ClusterName, labels.ManagedBy, labels.ManagedByValue, labels.RemoteService)))

	p := startController(t, "controller", "--link", "dead="+path, "--v", "4")
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 80, "true")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"api-dead", "web-west"}, names(mirrors(c, ns)))
	}, wait, tick, "west is mirrored although dead cannot be reached")
	// The start-up sweep's sync of dead's mirror was seen, and left it
	// alone; the controller still runs.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b := p.Log(c)
		assert.Regexp(c, `"Synced".* key="dead/`+ns+`/api".* skipped="link not synced"`, b)
	}, wait, tick)
	env.RequireAlive(t, p)
	_, err := east.Client.CoreV1().Services(ns).Get(ctx, "api-dead", metav1.GetOptions{})
	assert.NoError(t, err, "the unreachable cluster's mirror is kept")
}

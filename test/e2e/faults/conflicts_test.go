package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// conflictsMetric is the controller's counter of wanted names held by
// others, for resource.
func conflictsMetric(resource string) string {
	return `coredns_mcmirror_controller_conflicts_total{resource="` + resource + `"}`
}

// nameTakenEvent returns the message of a MirrorNameTaken Event on the
// object kind/name of east's namespace ns, or "".
func nameTakenEvent(c require.TestingT, ns, kind, name string) string {
	list, err := env.Cluster("east").Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + controller.ReasonNameTaken})
	require.NoError(c, err)
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind {
			return e.Message
		}
	}
	return ""
}

// Names wanted twice: an EndpointSlice nobody of ours made holds a
// mirror's name, and two linked clusters' mirrors want the same name
// (foo-east of west and foo of east-west are both foo-east-west). The
// controller leaves what it does not own alone, counts each conflict,
// says so in an Event, and makes the loser's mirror once the winner goes.
func TestNameConflicts(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west, eastWest := env.Cluster("east"), env.Cluster("west"), env.Cluster("east-west")
	const ns = "conflicts"
	env.CreateNamespace(t, ns)
	ls := []harness.Link{{Name: "west", Kubeconfig: west.LinkFile(t)}, {Name: "east-west", Kubeconfig: eastWest.LinkFile(t)}}
	ctl := startController(t, "controller", "", ls)
	// Evidence the controller works before anything conflicts.
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "plain", labels.ExportGateway)))
	waitMirrors(t, ns, []string{"plain-west"}, 60*time.Second)
	slicesBefore := counterBaseline(t, ctl.MetricsURL(), conflictsMetric("endpointslices"))
	servicesBefore := counterBaseline(t, ctl.MetricsURL(), conflictsMetric("services"))

	// A foreign EndpointSlice holds the name of taken-west's slice.
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-west", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: "someone-elses", discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.99"}}},
	}
	foreign, err := east.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, foreign, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "taken", labels.ExportGateway)))

	// Two clusters want foo-east-west.
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "foo-east", labels.ExportGateway)))
	require.NoError(t, eastWest.Apply(ctx, clusterIPExport(ns, "foo", labels.ExportGateway)))

	var sliceEvent, svcEvent string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, harness.RequireSeries(c, ctl.MetricsURL(), conflictsMetric("endpointslices")), slicesBefore, "slice conflict counted")
		assert.Greater(c, harness.RequireSeries(c, ctl.MetricsURL(), conflictsMetric("services")), servicesBefore, "service conflict counted")
		sliceEvent = nameTakenEvent(c, ns, "EndpointSlice", "taken-west")
		svcEvent = nameTakenEvent(c, ns, "Service", "foo-east-west")
		assert.NotEmpty(c, sliceEvent, "Event on the foreign EndpointSlice")
		assert.NotEmpty(c, svcEvent, "Event on the contested Service")
	}, 60*time.Second, 200*time.Millisecond, "conflicts reported")
	t.Logf("Events: %q; %q", sliceEvent, svcEvent)
	assert.Contains(t, sliceEvent, "west/"+ns+"/taken", "the Event names the mirror that wanted the name")

	env.RequireAlive(t, ctl.Process)
	got, err := east.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "taken-west", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, foreign.UID, got.UID, "the foreign EndpointSlice is not replaced")
	assert.Equal(t, foreign.ResourceVersion, got.ResourceVersion, "nor changed")

	// One mirror holds foo-east-west; the Event names the other.
	winner, err := east.Client.CoreV1().Services(ns).Get(ctx, "foo-east-west", metav1.GetOptions{})
	require.NoError(t, err)
	owner := winner.Labels[labels.ClusterName]
	require.Contains(t, []string{"west", "east-west"}, owner)
	loser, winnerCluster, winnerSvc := "east-west/"+ns+"/foo", west, "foo-east"
	if owner == "east-west" {
		loser, winnerCluster, winnerSvc = "west/"+ns+"/foo-east", eastWest, "foo"
	}
	assert.Contains(t, svcEvent, loser, "the Event names the mirror that lost")

	// The winner is unexported: the loser's mirror takes the name.
	require.NoError(t, winnerCluster.LabelService(ctx, ns, winnerSvc, labels.Exported, ""))
	start := time.Now()
	loserCl := strings.SplitN(loser, "/", 2)[0]
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := east.Client.CoreV1().Services(ns).Get(ctx, "foo-east-west", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, loserCl, s.Labels[labels.ClusterName])
		assert.NotEqual(c, winner.UID, s.UID)
		assert.NotEqual(c, corev1.ClusterIPNone, s.Spec.ClusterIP)
	}, 30*time.Second, 100*time.Millisecond, "the loser's mirror is made once the winner goes")
	t.Logf("the name passed to %s's mirror %.1fs after the winner was unexported", loserCl, time.Since(start).Seconds())
}

package watch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var fedMember = map[string]string{labels.Federated: labels.FederatedMember}

// The members of federated Services are held by a third watch of Services,
// selected by mirror.linkerd.io/federated=member, which the export selector
// does not select: west's web, labelled so only, is answered in
// web-federated in flat mode (its pods), with east's own web; it gets no
// name of its own. A member also exported in gateway mode is not
// answered. Losing the label drops it and its slices; the local pod
// unready, nothing is left and the name goes down the chain; labelled
// again, its slices are sent again and it is answered again.
func TestFederatedMembersWatch(t *testing.T) {
	ctx := context.Background()
	port := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	west := newFakeAPI(t) // a real label selector, as an API server applies it
	west.put(service("web", fedMember, "10.100.0.7", port))
	west.put(flatSlice("web-1", "web", "10.1.0.1", "10.1.0.2"))
	gwLabels := map[string]string{labels.Federated: labels.FederatedMember, labels.Exported: labels.ExportGateway}
	west.put(service("gw", gwLabels, "10.100.0.8", port))
	west.put(flatSlice("gw-1", "gw", "10.1.0.8"))
	west.put(service("plain", nil, "10.100.0.9", port))
	west.put(flatSlice("plain-1", "plain", "10.1.0.9"))
	localSlice := flatSlice("web-l", "web", "10.0.0.5")
	local := remotetest.NewClientset(
		fedService("web-federated", "web@west", "web"),
		fedService("gw-federated", "gw@west", "-"),
		service("web", fedMember, "10.96.5.5", port), localSlice,
	)
	m := startWith(t, local, eventBound, 0, "west", west.client())
	cl := m.watch.cluster("west")
	fed := "web-federated" + z

	waitFor(t, eventBound, "web-federated", answersA(t, m, fed, "10.1.0.1", "10.1.0.2", "10.96.5.5"))
	waitFor(t, eventBound, "the groups built", idle(m))
	for name, want := range map[string][]string{
		"west.web-federated" + z: {"10.1.0.1", "10.1.0.2"},
		"gw-federated" + z:       {passedOn}, // gateway mode only
		"web-west" + z:           {passedOn}, // federated, not exported
		"web-global" + z:         {passedOn},
		"plain-west" + z:         {passedOn},
	} {
		assert.Equal(t, want, second(askA(t, m, name)), name)
	}
	wantKeys(t, "federated members held", keys(cl.fedServices), "default/gw", "default/web")
	wantKeys(t, "exported Services held", keys(cl.services), "default/gw")
	wantKeys(t, "slices held", sliceKeys(cl), "default/gw-1", "default/web-1")
	s := m.watch.Member("west", "default", "web")
	assert.False(t, s == nil || s.Mode != labels.Flat, "Member(west, web) = %+v, want flat", s)
	s = m.watch.Member("west", "default", "gw")
	assert.False(t, s == nil || s.Mode != labels.Gateway, "Member(west, gw) = %+v, want gateway", s)
	assert.Equal(t, []string{"web-federated"}, m.watch.Federations("default", "web"), "Federations(web)")
	waitFor(t, eventBound, "the members counted", func() bool {
		return testutil.ToFloat64(linkObjects.WithLabelValues("west", "federated-service")) == 2 &&
			testutil.ToFloat64(linkObjects.WithLabelValues("east", "federated-service")) == 1
	})

	// West's web is no longer a member: east's alone, west's slices gone.
	west.put(service("web", nil, "10.100.0.7", port))
	waitFor(t, eventBound, "west's web out", answersA(t, m, fed, "10.96.5.5"))
	waitFor(t, eventBound, "its slices dropped", func() bool {
		return slices.Equal(sliceKeys(cl), []string{"default/gw-1"})
	})

	// East's pod unready: no ready member, the next plugin answers.
	localSlice = localSlice.DeepCopy()
	localSlice.Endpoints = []discovery.Endpoint{podEndpoint("", "10.0.0.5", false)}
	_, err := local.DiscoveryV1().EndpointSlices("default").Update(ctx, localSlice, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, eventBound, "web-federated passed on", answersA(t, m, fed, passedOn))

	// West's web a member again: its slices are sent again, it is answered.
	west.put(service("web", fedMember, "10.100.0.7", port))
	waitFor(t, eventBound, "west's web back", answersA(t, m, fed, "10.1.0.1", "10.1.0.2"))

	// The federated Service goes.
	require.NoError(t, local.CoreV1().Services("default").Delete(ctx, "web-federated", metav1.DeleteOptions{}))
	waitFor(t, eventBound, "web-federated gone", answersA(t, m, fed, passedOn))
	waitFor(t, 5*time.Second, "the groups built", idle(m))
	assert.Equal(t, []string{passedOn}, second(askA(t, m, "west.web-federated"+z)), "west.web-federated once the federated Service is gone")
}

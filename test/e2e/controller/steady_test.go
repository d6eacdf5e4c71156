package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Against a real API server (defaulting included), a sync of unchanged
// state writes nothing: after convergence, syncs caused by events on the
// mirrors add no write. Only this test's objects count: the controller
// logs each sync's writes by key, and a watch on the test's namespace
// sees every change to its mirrors, whoever makes it.
func TestSteadyStateWritesNothing(t *testing.T) {
	const ns = "e2e-steady"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	p := startController(t, "controller", "--v", "4")

	require.NoError(t, west.Apply(ctx, statefulSet(ns, "db", 2, "true")))
	// One unnamed port, and one of each protocol.
	_, err := west.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"mirror.linkerd.io/exported": "true"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9000}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = west.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns", Labels: map[string]string{"mirror.linkerd.io/exported": "true"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	want := []string{"db-set-0-west", "db-set-1-west", "db-west", "dns-west", "plain-west"}
	keys := []string{"west/" + ns + "/db", "west/" + ns + "/dns", "west/" + ns + "/plain"}
	waitMirrors(t, ns, want...)
	// Converged: each key has had a sync that wrote nothing, and each
	// export has its ServiceImport, derived Service and west's slice,
	// with an endpoint for each pod or the egress.
	waitSynced(t, p, 0, keys...)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, eps := range map[string]int{"db": 2, "dns": 1, "plain": 1} {
			imp, ok := readImport(c, ns, name)
			if assert.True(c, ok, "import of %s", name) {
				assert.Len(c, imp.slices["west"].Endpoints, eps, "import slice of %s", name)
			}
		}
	}, wait, tick)

	// From here on, watch every change to the namespace's Services and
	// EndpointSlices in east.
	svcs, err := east.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	svcWatch, err := east.Client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: svcs.ResourceVersion})
	require.NoError(t, err)
	defer svcWatch.Stop()
	eps, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	sliceWatch, err := east.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: eps.ResourceVersion})
	require.NoError(t, err)
	defer sliceWatch.Stop()
	offset := len(p.Log(t)) // later lines are after it

	// Someone labels every mirror: each event is a sync of its key, and
	// no sync writes.
	for _, name := range want {
		_, err := east.Client.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	synced := waitSynced(t, p, offset, keys...)
	for _, k := range keys {
		for _, n := range synced[k] {
			assert.Zero(t, n, "a sync of %s after the labels wrote %d times: %v", k, n, synced[k])
		}
	}

	// The watches saw our five patches, then nothing: markers written
	// after the syncs close the window of each watch.
	marker := []byte(`{"metadata":{"annotations":{"e2e-marker":"end"}}}`)
	_, err = east.Client.CoreV1().Services(ns).Patch(ctx, "plain-west", types.MergePatchType, marker, metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = east.Client.DiscoveryV1().EndpointSlices(ns).Patch(ctx, "plain-west", types.MergePatchType, marker, metav1.PatchOptions{})
	require.NoError(t, err)
	var changes []string
	for svcDone, sliceDone := false, false; !svcDone || !sliceDone; {
		select {
		case ev := <-svcWatch.ResultChan():
			svc := ev.Object.(*corev1.Service)
			if svc.Annotations["e2e-marker"] == "end" {
				svcDone = true
				continue
			}
			changes = append(changes, fmt.Sprintf("%s service %s touched=%s", ev.Type, svc.Name, svc.Labels["touched"]))
		case ev := <-sliceWatch.ResultChan():
			es := ev.Object.(*discoveryv1.EndpointSlice)
			if es.Annotations["e2e-marker"] == "end" {
				sliceDone = true
				continue
			}
			changes = append(changes, fmt.Sprintf("%s endpointslice %s", ev.Type, es.Name))
		case <-time.After(wait):
			t.Fatal("the markers did not arrive")
		}
	}
	var patched []string
	for _, name := range want {
		patched = append(patched, fmt.Sprintf("MODIFIED service %s touched=yes", name))
	}
	assert.ElementsMatch(t, patched, changes, "only the test's own patches changed the mirrors")
	m := mirrors(t, ns)
	assert.Equal(t, "yes", m["plain-west"].Labels["touched"], "labels of others are kept")
	env.RequireAlive(t, p)
}

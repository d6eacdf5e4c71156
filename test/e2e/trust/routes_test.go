package trust_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// mirrorLabels are the labels the controller puts on a mirror of west's
// Service svc.
func mirrorLabels(svc string) map[string]string {
	return map[string]string{
		labels.ManagedBy: labels.ManagedByValue, labels.MirroredService: labels.MirroredServiceValue,
		labels.ClusterName: "west", labels.RemoteService: svc,
	}
}

// Without the admission policy (east has none), a user bound to the edit
// ClusterRole in another namespace writes Services that claim a real
// mirror's egress port: one labelled as a mirror after the mirror was
// made, one older Service of theirs relabelled so, and one held by a
// finalizer while being deleted whose annotation claims the port and fifty
// others. None of them changes the real mirror's route: a real egress keeps
// carrying bytes through the port to the real mirror's pod, while its
// metrics and its log show that it saw each forged object, and what it made
// of it. The controller is stopped once the mirror is made, so that the
// forged objects are not cleaned up meanwhile: the egress is on its own,
// as when the controller is down or slow.
func TestForgedServiceChangesNoRoute(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	shop := env.UniqueNamespace(t, "shop", east, west)
	tenant := env.UniqueNamespace(t, "tenant", east)
	pod := west.RunEchoPods(t, podPort, "web-0")[0]
	ports := harness.EgressPortWindow()
	f := startFleet(t, ports, "--allow-selectorless", shop+"/*")
	dev := editor(t, east, tenant, "dev")

	// An ordinary Service of the tenant, older than the mirror.
	_, err := dev.CoreV1().Services(tenant).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "old-west"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has seconds

	exportService(t, west, shop, "web", "web-0", pod.IP.String())
	mirror, port := waitMirror(t, east, shop, "web-west")
	addr := harness.LoopbackAddr(port)
	require.Equal(t, "west/web-0", harness.WaitGreet(t, addr, wait, "the real mirror's egress port reaches west's pod"))
	f.Controller.Stop()
	t.Logf("real mirror %s/%s (made %s): egress port %d", shop, mirror.Name, mirror.CreationTimestamp, port)

	claim := func(ports ...int) map[string]string {
		rec := map[string]int32{}
		for i, p := range ports {
			rec[labels.EgressPortKey(int32(80+i), "TCP")] = int32(p)
		}
		return map[string]string{labels.EgressPorts: labels.FormatEgressPorts(rec)}
	}
	// 1. A Service labelled as a mirror, claiming the port and one
	// outside the controller's range.
	_, err = dev.CoreV1().Services(tenant).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "evil-west", Labels: mirrorLabels("evil"), Annotations: claim(port, 22)},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "ssh", Port: 81}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "no admission policy here: the edit role may label a Service so")
	// 2. The older Service relabelled as a mirror claiming the port.
	old, err := dev.CoreV1().Services(tenant).Get(ctx, "old-west", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, old.CreationTimestamp.Before(&mirror.CreationTimestamp), "older than the mirror")
	old.Labels, old.Annotations = mirrorLabels("old"), claim(port)
	_, err = dev.CoreV1().Services(tenant).Update(ctx, old, metav1.UpdateOptions{})
	require.NoError(t, err)
	// 3. A Service claiming the port and fifty more of the range, held by
	// a finalizer, deleted.
	hogPorts := []int{port}
	for p := ports.Lo; len(hogPorts) < 51; p++ {
		if p != port {
			hogPorts = append(hogPorts, p)
		}
	}
	hog := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hog-west", Labels: mirrorLabels("hog"), Annotations: claim(hogPorts...),
			Finalizers: []string{"example.com/hold"}},
	}
	for i := range hogPorts {
		hog.Spec.Ports = append(hog.Spec.Ports, corev1.ServicePort{Name: "p" + strconv.Itoa(i), Port: int32(80 + i)})
	}
	_, err = dev.CoreV1().Services(tenant).Create(ctx, hog, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = east.Client.CoreV1().Services(tenant).Patch(context.Background(), "hog-west", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	require.NoError(t, dev.CoreV1().Services(tenant).Delete(ctx, "hog-west", metav1.DeleteOptions{}))

	// The egress saw the claims on the port...
	const gw = "coredns_mcmirror_gateway_"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metric(c, f.Gateways["east"], gw+"egress_port_conflicts", nil), "one port claimed thrice")
	}, wait, tick, "the egress saw the conflict")
	// ... and the real mirror's port goes on reaching the real mirror's
	// pod, connection after connection.
	for range 10 {
		got, err := harness.Greet(addr)
		require.NoError(t, err, "through the real mirror's egress port")
		require.Equal(t, "west/web-0", got)
	}
	// What it made of each forged Service, in its metrics and its log.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 51.0, metric(c, f.Gateways["east"], gw+"egress_claims_ignored", map[string]string{"reason": "deleting"}))
		// Mirrors of the other tests' windows are out of this range too.
		assert.GreaterOrEqual(c, metric(c, f.Gateways["east"], gw+"egress_claims_ignored", map[string]string{"reason": "out_of_range"}), 1.0)
		conflict := f.Gateways["east"].Process().LogLines(c, "serving the first", shop+"/web-west", tenant+"/evil-west", tenant+"/old-west")
		if assert.NotEmpty(c, conflict, "the conflict is logged") {
			line := conflict[len(conflict)-1]
			assert.Less(c, strings.Index(line, shop+"/web-west"), strings.Index(line, tenant+"/"), "the real mirror first: %s", line)
		}
		assert.NotEmpty(c, f.Gateways["east"].Process().LogLines(c, "Ignored a Service's claim on egress ports", tenant+"/hog-west", "deleting"))
		assert.NotEmpty(c, f.Gateways["east"].Process().LogLines(c, "Ignored a Service's claim on egress ports", tenant+"/evil-west", "out_of_range"))
	}, wait, tick, "the egress logged and counted the forged Services")
	// No port of the forged claims is open.
	assert.Equal(t, 1.0, metric(t, f.Gateways["east"], gw+"egress_ports", nil), "the egress listens on the real mirror's port only")
	env.RequireAlive(t, f.Gateways["east"].Process(), f.Gateways["west"].Process())
}

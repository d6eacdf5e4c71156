package controller_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Against a real API server (defaulting included), a sync of unchanged
// state writes nothing: after convergence, syncs caused by events on the
// mirrors add no write.
func TestSteadyStateWritesNothing(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	const ns = "e2e-steady"
	namespace(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	startController(t, "controller", "--metrics-addr", metrics)

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
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := mirrors(ctx, ns)
		require.NoError(c, err)
		assert.Equal(c, want, names(m))
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)

	// Quiet: the write counter stops moving.
	var writes float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		w1 := scrape(c, metrics, "coredns_mcmirror_controller_writes_total")
		time.Sleep(time.Second)
		w2 := scrape(c, metrics, "coredns_mcmirror_controller_writes_total")
		assert.Equal(c, w1, w2)
		writes = w2
	}, wait, tick)
	syncs := scrape(t, metrics, `coredns_mcmirror_controller_syncs_total{result="success"}`)

	// Someone labels every mirror: each event is a sync, and no sync
	// writes.
	for _, name := range want {
		_, err := east.Client.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, scrape(c, metrics, `coredns_mcmirror_controller_syncs_total{result="success"}`), syncs+4)
	}, wait, tick)
	assert.Equal(t, writes, scrape(t, metrics, "coredns_mcmirror_controller_writes_total"), "no writes")
	m, err := mirrors(ctx, ns)
	require.NoError(t, err)
	assert.Equal(t, "yes", m["plain-west"].Labels["touched"], "labels of others are kept")
}

// scrape returns the sum of the samples of a metric (a name, or a name
// with labels) at the controller's /metrics.
func scrape(t require.TestingT, addr, metric string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if name == metric || (!strings.Contains(metric, "{") && strings.HasPrefix(name, metric+"{")) {
			v, err := strconv.ParseFloat(value, 64)
			require.NoError(t, err)
			sum += v
		}
	}
	require.NoError(t, sc.Err())
	return sum
}

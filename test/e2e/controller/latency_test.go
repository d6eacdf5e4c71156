package controller_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestExportLatency measures the time from a remote export (the exported
// Service created in west) to its mirror's ClusterIP existing in east, as
// seen by a watch on east, one export at a time. It reports the
// distribution; it asserts nothing about it (timed assertions are flaky),
// only that every export is mirrored.
func TestExportLatency(t *testing.T) {
	const ns = "e2e-latency"
	const n = 25
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	startController(t, "controller")

	// A first export proves the controller is up and synced.
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "warmup", 80, "true")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		service(c, east, ns, "warmup-west")
	}, wait, tick)

	w, err := east.Client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{LabelSelector: labels.MirrorSelector})
	require.NoError(t, err)
	defer w.Stop()
	var took []time.Duration
	for i := range n {
		name := fmt.Sprintf("lat-%02d", i)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labels.Exported: labels.ExportGateway}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		start := time.Now()
		_, err := west.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		require.NoError(t, err)
		deadline := time.After(wait)
	loop:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				require.True(t, ok, "watch ended")
				if s, isSvc := ev.Object.(*corev1.Service); isSvc && ev.Type == watch.Added && s.Name == name+"-west" {
					require.NotEmpty(t, s.Spec.ClusterIP)
					took = append(took, time.Since(start))
					break loop
				}
			case <-deadline:
				t.Fatalf("%s was not mirrored", name)
			}
		}
	}
	slices.Sort(took)
	t.Logf("remote export -> mirror ClusterIP, %d exports: min %v, median %v, p90 %v, max %v",
		n, took[0].Round(time.Microsecond), took[n/2].Round(time.Microsecond),
		took[n*9/10].Round(time.Microsecond), took[n-1].Round(time.Microsecond))

}

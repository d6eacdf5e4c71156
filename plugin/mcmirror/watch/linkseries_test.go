package watch

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// isolateReadyInstances makes the test the only one whose instances count
// as knowing their links, for its duration: other tests' plugins may
// still run.
func isolateReadyInstances(t *testing.T) {
	linkSeries.Lock()
	saved := linkSeries.ready
	linkSeries.ready = 0
	linkSeries.Unlock()
	t.Cleanup(func() {
		linkSeries.Lock()
		linkSeries.ready += saved
		linkSeries.Unlock()
	})
}

func linkedCluster() *fake.Clientset {
	return remotetest.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1"))
}

// A reload: the new instance starts, then the old one stops. A cluster
// both link keeps its series; one only the old instance linked loses
// them, whichever of the two comes first: the old instance stopping or the
// new one knowing its links.
func TestReloadDropsSeriesOfUnlinkedClusters(t *testing.T) {
	isolateReadyInstances(t)
	for _, tc := range []struct {
		name          string
		newReadyFirst bool
	}{{"new instance ready first", true}, {"old instance stopped first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			keep, drop := "rk"+tc.name[:3], "rd"+tc.name[:3]
			old := startWith(t, remotetest.NewClientset(), time.Second, 0, keep, linkedCluster(), drop, linkedCluster())
			waitFor(t, 5*time.Second, "the old instance ready", old.watch.HasSynced)
			waitFor(t, 5*time.Second, "both links synced", func() bool {
				return testutil.ToFloat64(linkSynced.WithLabelValues(keep)) == 1 && testutil.ToFloat64(linkSynced.WithLabelValues(drop)) == 1
			})

			var next *stack
			if tc.newReadyFirst {
				next = startWith(t, remotetest.NewClientset(), time.Second, 0, keep, linkedCluster())
				waitFor(t, 5*time.Second, "the new instance ready", next.watch.HasSynced)
				require.NotZero(t, seriesOf(drop), "%s's series gone while the old instance still watches it", drop)
				old.watch.Stop()
			} else {
				old.watch.Stop()
				// Nobody knows yet whether a link Secret brings it back.
				require.NotZero(t, seriesOf(drop), "%s's series gone before any instance knows its links", drop)
				next = startWith(t, remotetest.NewClientset(), time.Second, 0, keep, linkedCluster())
				waitFor(t, 5*time.Second, "the new instance ready", next.watch.HasSynced)
			}
			assert.EqualValues(t, 0, seriesOf(drop), "series of %s, which no instance links any more", drop)
			waitFor(t, 5*time.Second, keep+" synced in the new instance", func() bool {
				return testutil.ToFloat64(linkSynced.WithLabelValues(keep)) == 1
			})
			assert.NotZero(t, seriesOf(keep), "%s, linked by both instances, lost its series", keep)
		})
	}
}

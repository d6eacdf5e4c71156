package mcmirror

import (
	"context"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coredns/coredns/plugin/pkg/fall"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestReady(t *testing.T) {
	src := indextest.Fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	assert.True(t, m.Ready(), "not ready with a synced source")
	src.Synced = false
	assert.False(t, m.Ready(), "ready with a source that has not synced")
}

// Once ready, the server stays ready and answers NXDOMAIN, not SERVFAIL,
// for a name that does not exist under a claimed one, while a link added
// later has not synced (it never will) and while groups are rebuilt.
func TestNoServfailAfterFirstSync(t *testing.T) {
	west := remotetest.NewClientset(watchtest.Service("web", watchtest.ExportedFlat, corev1.ClusterIPNone), watchtest.FlatSlice("web-1", "web", "10.1.0.1"))
	m := startPlugin(t, remotetest.NewClientset(), Options{StartupTimeout: time.Hour}, "west", west)
	watchtest.WaitFor(t, watchtest.EventBound, "the first answer", answersA(t, m, "web-west"+z, "10.1.0.1"))
	require.True(t, m.Ready(), "not ready after Start")
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	require.NoError(t, err)
	lateErrors := func() float64 {
		return metricValue(t, "link_errors_total", "cluster", "late", "reason", link.FailureUnreachable)
	}
	before := lateErrors()
	require.NoError(t, m.watch.AddLink("late", dead))
	watchtest.WaitFor(t, watchtest.EventBound, "the late link tried", func() bool {
		return lateErrors() > before
	})
	assert.True(t, m.Ready(), "a link added later made the server unready")
	assert.Equal(t, "NXDOMAIN", dns.RcodeToString[query(t, m, "web-9.web-west"+z, dns.TypeA).Rcode], "unknown pod of a claimed name")

	// A group queued for a rebuild does not either. The slice changes
	// without pause while the names are asked, and the churn lasts until
	// the answers show that rebuilds landed between the queries: the
	// group's own address is seen to change several times, and the
	// unknown pod was asked about in between. Without that evidence the
	// NXDOMAINs would say nothing of a group being rebuilt.
	const rebuildsWanted = 5
	rebuilds, asked := 0, 0
	last := "10.1.0.1"
	deadline := time.Now().Add(watchtest.EventBound)
	for i := 0; rebuilds < rebuildsWanted; i++ {
		require.False(t, time.Now().After(deadline), "after %d updates and %d queries, %d rebuilds seen, want %d", i, asked, rebuilds, rebuildsWanted)
		_, _ = west.DiscoveryV1().EndpointSlices("default").Update(context.Background(),
			watchtest.FlatSlice("web-1", "web", "10.1.0."+string(rune('1'+i%9))), metav1.UpdateOptions{})
		require.Equal(t, "NXDOMAIN", dns.RcodeToString[query(t, m, "web-9.web-west"+z, dns.TypeA).Rcode], "unknown pod during churn")
		asked++
		rc, got := askA(t, m, "web-west"+z)
		require.False(t, rc != dns.RcodeSuccess || len(got) != 1, "the churned name during churn: %s %v, want one address", dns.RcodeToString[rc], got)
		if got[0] != last {
			rebuilds++
			last = got[0]
		}
		require.True(t, m.Ready(), "unready during churn")
	}
	t.Logf("%d queries of the unknown pod, NXDOMAIN each, while %d rebuilds landed", asked, rebuilds)
}

package watch

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// These tests run the watches against fakeAPI, a server on a real socket
// that goes down, comes back and refuses credentials.

// stale_max_age (Options.StaleMaxAge) is every link's, and never the
// local cluster's, whose state is never withdrawn.
func TestStaleMaxAgeOption(t *testing.T) {
	m := newStack(t, remotetest.NewClientset(), Options{StaleMaxAge: 90 * time.Second})
	t.Cleanup(m.watch.Stop)
	m.link(t, "west", remotetest.NewClientset())
	assert.Equal(t, 90*time.Second, m.watch.cluster("west").health.maxAge, "link west stale_max_age")
	assert.Zero(t, m.watch.cluster("east").health.maxAge, "the stale_max_age of the local cluster, whose state is never withdrawn")
}

// A linked cluster whose API server goes away keeps its last answers;
// a change made while it was away is answered soon after it comes back,
// without a restart.
func TestStaleServingAndRecovery(t *testing.T) {
	api := newFakeAPI(t, service("web", flatExport, corev1.ClusterIPNone),
		flatSlice("web-1", "web", "10.1.0.1"))
	m := startWith(t, remotetest.NewClientset(), eventBound, 0, "stale", api.client())
	name := "web-stale" + z
	waitFor(t, eventBound, "the first answer", answersA(t, m, name, "10.1.0.1"))
	require.EqualValues(t, 1, testutil.ToFloat64(linkUp.WithLabelValues("stale")), "link_up while up")
	errs := unreachable("stale")

	api.down()
	waitFor(t, eventBound, "the outage seen", func() bool {
		return testutil.ToFloat64(linkUp.WithLabelValues("stale")) == 0 &&
			unreachable("stale") > errs
	})
	// Down for 10 s: long enough for client-go's default backoff to
	// reach 6.4 s, and double it with jitter, before the next retry.
	// Failed retries clear nothing.
	n := unreachable("stale")
	down := time.Now()
	waitFor(t, 10*time.Second+eventBound, "a 10 s outage with failed retries", func() bool {
		return time.Since(down) > 10*time.Second && unreachable("stale") >= n+3
	})
	require.True(t, answersA(t, m, name, "10.1.0.1")(), "the last known answer is gone while the link is down")

	// Changed while away; back, and answered at the next retry, without
	// a restart: within the longest delay between two retries
	// (remote.Backoff's cap and its jitter, 3 s) and what a loaded machine
	// takes to list, watch and rebuild. client-go's own backoff would
	// have grown to 6.4 s by now, and its jitter doubles that. How fast
	// it comes back is for the benchmarks; the log says it.
	api.put(flatSlice("web-1", "web", "10.1.0.2"))
	api.up()
	back := time.Now()
	retry := time.Duration(float64(remote.Backoff.Cap) * (1 + remote.Backoff.Jitter))
	waitFor(t, retry+7*time.Second, "the change made during the outage", answersA(t, m, name, "10.1.0.2"))
	t.Logf("answered %s after the API server came back (retries at most %s apart)", time.Since(back).Round(time.Millisecond), retry)
	waitFor(t, eventBound, "link_up back to 1", func() bool { return testutil.ToFloat64(linkUp.WithLabelValues("stale")) == 1 })
}

// With stale_max_age, the names of a link down for longer go, and come
// back when it answers again.
func TestStaleMaxAge(t *testing.T) {
	api := newFakeAPI(t, service("web", flatExport, corev1.ClusterIPNone),
		flatSlice("web-1", "web", "10.1.0.1"))
	const maxAge = 2 * time.Second
	m := startWith(t, remotetest.NewClientset(), eventBound, maxAge, "aged", api.client())
	name := "web-aged" + z
	waitFor(t, eventBound, "the first answer", answersA(t, m, name, "10.1.0.1"))

	// The link's first failure comes after down, so nothing may be
	// withdrawn before down+maxAge: an answer asked for, and received,
	// before then must be the last known one. That holds however slow
	// the machine; a slow machine only asks fewer times before the
	// bound. At least one such answer must come once the outage is seen
	// (link_up 0): a machine at load 4 sees a refused connection within
	// a second.
	down := time.Now()
	api.down()
	staleSeen := false
	waitFor(t, eventBound, "withdrawn", func() bool {
		failing := testutil.ToFloat64(linkUp.WithLabelValues("aged")) == 0
		ok := answersA(t, m, name, "10.1.0.1")()
		if time.Since(down) < maxAge {
			require.True(t, ok, "withdrawn %s after the API server went, before stale_max_age %s", time.Since(down).Round(time.Millisecond), maxAge)
			staleSeen = staleSeen || failing
		}
		return testutil.ToFloat64(linkWithdrawn.WithLabelValues("aged")) == 1 && m.index.Lookup(name) == nil
	})
	require.True(t, staleSeen, "no answer while the link was seen down before stale_max_age %s: the outage was not seen in time to tell", maxAge)
	assert.Equal(t, []string{passedOn}, second(askA(t, m, name)), "withdrawn name answers, not the next plugin's") // not claimed any more

	api.up()
	waitFor(t, eventBound, "back", answersA(t, m, name, "10.1.0.1"))
	assert.EqualValues(t, 0, testutil.ToFloat64(linkWithdrawn.WithLabelValues("aged")), "link_withdrawn once back")
}

// Refused credentials, at start-up and after a first good sync: the other
// links are answered within startup_timeout, the refusal is counted by
// reason, and nothing of the refused link is deleted.
func TestRefusedLink(t *testing.T) {
	for _, tc := range []struct {
		code   int
		reason string
	}{{http.StatusUnauthorized, link.FailureUnauthorized}, {http.StatusForbidden, link.FailureForbidden}} {
		t.Run(tc.reason, func(t *testing.T) {
			good := remotetest.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.9"))

			// At start-up.
			refused := newFakeAPI(t)
			refused.put(service("web", flatExport, corev1.ClusterIPNone))
			refused.refuse(tc.code)
			cl := "refused-" + tc.reason
			before := testutil.ToFloat64(linkErrors.WithLabelValues(cl, tc.reason))
			// Start returns (startBounded) although the refused link
			// never syncs.
			m := startWith(t, remotetest.NewClientset(), 300*time.Millisecond, 0, "good", good, cl, refused.client())
			waitFor(t, eventBound, "the good link", answersA(t, m, "web-good"+z, "10.1.0.9"))
			waitFor(t, eventBound, "readiness with the refused link", m.watch.HasSynced)
			waitFor(t, eventBound, "the refusal counted by reason", func() bool {
				return testutil.ToFloat64(linkErrors.WithLabelValues(cl, tc.reason)) > before
			})
			assert.EqualValues(t, 0, testutil.ToFloat64(linkSynced.WithLabelValues(cl)), "link_synced")

			// After a first good sync.
			later := newFakeAPI(t, service("web", flatExport, corev1.ClusterIPNone),
				flatSlice("web-1", "web", "10.1.0.7"))
			cl2 := "expired-" + tc.reason
			require.NoError(t, m.watch.AddLink(cl2, later.client()))
			waitFor(t, eventBound, "the late link", answersA(t, m, "web-"+cl2+z, "10.1.0.7"))
			before = testutil.ToFloat64(linkErrors.WithLabelValues(cl2, tc.reason))
			later.refuse(tc.code) // ends the watches: the token expired, the role went
			waitFor(t, eventBound, "the refusal counted", func() bool {
				return testutil.ToFloat64(linkErrors.WithLabelValues(cl2, tc.reason)) > before &&
					testutil.ToFloat64(linkUp.WithLabelValues(cl2)) == 0
			})
			assert.True(t, answersA(t, m, "web-"+cl2+z, "10.1.0.7")(), "a refused link's names were deleted")
			later.refuse(0)
			waitFor(t, eventBound, "up again", func() bool { return testutil.ToFloat64(linkUp.WithLabelValues(cl2)) == 1 })
			assert.True(t, answersA(t, m, "web-"+cl2+z, "10.1.0.7")(), "names lost after the refusal ended")
		})
	}
}

// A link whose address accepts TCP and never answers TLS does not hold
// start-up past startup_timeout; it is counted unreachable once it has
// given no answer for remote.NoAnswerAfter (15 s). That the server is ready before
// that count moves is what shows start-up did not wait for the hanging
// link to fail: an order of events, which a slow machine keeps.
func TestHangingLink(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	hang, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + l.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	require.NoError(t, err)
	good := remotetest.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.9"))
	before := unreachable("hang")
	m := startWith(t, remotetest.NewClientset(), 500*time.Millisecond, 0, "good", good, "hang", hang)
	waitFor(t, eventBound, "readiness", m.watch.HasSynced)
	assert.False(t, unreachable("hang") > before, "ready only once the hanging link had failed, not at startup_timeout")
	waitFor(t, eventBound, "the good link", answersA(t, m, "web-good"+z, "10.1.0.9"))
	waitFor(t, eventBound, "the hanging link dialled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(conns) > 0
	})
	waitFor(t, remote.NoAnswerAfter+eventBound, "the hanging link counted unreachable", func() bool { return unreachable("hang") > before })
}

package watch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// relistProxy fronts a fakeAPI the way a restarted API server looks to a
// reflector: expire ends every watch (expireWhere those it selects), and a
// watch that resumes from a resourceVersion the proxy has expired is
// refused as too old (410), so the reflectors list again, by watch-list.
// hold keeps those watch-lists waiting, before any object is sent, until
// let.
type relistProxy struct {
	api *fakeAPI
	srv *httptest.Server

	mu        sync.Mutex
	expiredTo int          // resumed watches from this resourceVersion or older are refused
	watches   []proxyWatch // the watches served, to end
	hold      chan struct{}
	held      int // watch-lists waiting for let
	lists     int // watch-lists (sendInitialEvents=true) served
	plain     int // lists (not watches) served
}

func newRelistProxy(t *testing.T, objs ...metav1.Object) *relistProxy {
	p := &relistProxy{api: newFakeAPI(t, objs...), expiredTo: -1}
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() {
		p.let()
		p.expire() // ends the watches, so Close does not wait for them
		p.srv.Close()
	})
	return p
}

func (p *relistProxy) client(t *testing.T) kubernetes.Interface {
	c, err := kubernetes.NewForConfig(&rest.Config{Host: p.srv.URL})
	require.NoError(t, err)
	return c
}

func (p *relistProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		p.mu.Lock()
		p.plain++
		p.mu.Unlock()
		p.api.handle(w, r)
		return
	}
	initial := q.Get("sendInitialEvents") == "true"
	p.mu.Lock()
	if rv, err := parseRV(q.Get("resourceVersion")); !initial && err == nil && rv <= p.expiredTo {
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": &metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonExpired, Code: http.StatusGone, Message: "too old resource version"}})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p.watches = append(p.watches, proxyWatch{cancel: cancel, selector: q.Get("labelSelector")})
	var hold chan struct{}
	if initial {
		p.lists++
		if hold = p.hold; hold != nil {
			p.held++
		}
	}
	p.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.held--
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
	p.api.handle(w, r.WithContext(ctx))
}

func parseRV(s string) (int, error) {
	var rv int
	err := json.Unmarshal([]byte(s), &rv)
	return rv, err
}

// gateStats is g.stats() as one comparable value: active, held.
func gateStats(g *relistGate) [2]int { a, h := g.stats(); return [2]int{a, h} }

// proxyWatch is a watch the proxy serves.
type proxyWatch struct {
	cancel   context.CancelFunc
	selector string // its label selector
}

// expire ends every open watch and refuses to resume one from what has
// been sent so far.
func (p *relistProxy) expire() { p.expireWhere(func(string) bool { return true }) }

// expireWhere ends the open watches whose label selector match selects,
// and refuses to resume any watch from what has been sent so far: only
// those it ended ask.
func (p *relistProxy) expireWhere(match func(selector string) bool) {
	p.api.mu.Lock()
	rv := p.api.rv
	p.api.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expiredTo = rv
	kept := p.watches[:0]
	for _, w := range p.watches {
		if match(w.selector) {
			w.cancel()
		} else {
			kept = append(kept, w)
		}
	}
	p.watches = kept
}

// holdLists has the next watch-lists wait for let.
func (p *relistProxy) holdLists() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = make(chan struct{})
}

func (p *relistProxy) let() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
}

// listed is the number of watch-lists served; waiting, of those held;
// plainLists, of lists.
func (p *relistProxy) listed() int { p.mu.Lock(); defer p.mu.Unlock(); return p.lists }

func (p *relistProxy) plainLists() int { p.mu.Lock(); defer p.mu.Unlock(); return p.plain }

func (p *relistProxy) waiting() int { p.mu.Lock(); defer p.mu.Unlock(); return p.held }

// counting is the index, counting the group builds by group.
type counting struct {
	*index.Index
	mu     sync.Mutex
	builds map[object.GroupKey]int
}

func (c *counting) Sync(k object.GroupKey) []object.GroupKey {
	c.mu.Lock()
	c.builds[k]++
	c.mu.Unlock()
	return c.Index.Sync(k)
}

// startCounting starts the watches on links (name, client pairs) and
// counts the group builds by group.
func startCounting(t *testing.T, links ...any) (*stack, func(object.GroupKey) int) {
	t.Helper()
	m := newStack(t, remotetest.NewClientset(), Options{StartupTimeout: 5 * time.Second})
	m.link(t, links...)
	c := &counting{Index: m.index, builds: map[object.GroupKey]int{}}
	m.startFeeding(t, c)
	return m, func(k object.GroupKey) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.builds[k]
	}
}

// linkWatches is the number of watches of a linked cluster, each of which
// relists: per way of export (the export selector, the ServiceExport
// stamp, federated members) its Services and their EndpointSlices.
const linkWatches = 6

// idle reports whether no group is queued or being built.
func idle(m *stack) func() bool {
	return func() bool { return m.watch.queue.Len() == 0 && m.watch.inflight.Load() == 0 }
}

// When every link relists at once, they relist one at a time: while one
// link's relist is in its list, the others' do not even ask their API
// servers, and relist_in_progress is 1 until the last one is done. A
// relist keeps the objects that did not change (the very same ones) and
// rebuilds only the groups that did.
func TestRelistsOneAtATime(t *testing.T) {
	west := newRelistProxy(t, service("api", flatExport, corev1.ClusterIPNone),
		flatSlice("api-1", "api", "10.1.0.1"))
	paris := newRelistProxy(t, service("web", flatExport, corev1.ClusterIPNone),
		flatSlice("web-1", "web", "10.2.0.1"),
		service("db", flatExport, corev1.ClusterIPNone), flatSlice("db-1", "db", "10.2.0.5"))
	m, builds := startCounting(t, "west", west.client(t), "paris", paris.client(t))
	waitFor(t, 5*time.Second, "the first answers", func() bool {
		return answersA(t, m, "api-west"+z, "10.1.0.1")() && answersA(t, m, "web-paris"+z, "10.2.0.1")() &&
			answersA(t, m, "db-paris"+z, "10.2.0.5")()
	})
	waitFor(t, 5*time.Second, "the groups built", idle(m))
	require.Equal(t, [2]int{0, 0}, gateStats(m.watch.relists), "first lists went through the relist gate: active, held")
	pc := m.watch.cluster("paris")
	dbSvc, dbSlice, webSlice := held(pc.services, "db"), held(pc.slices[0], "db-1"), held(pc.slices[0], "web-1")
	before := map[object.GroupKey]int{}
	for _, svc := range []string{"api", "db", "web"} {
		k := object.ServiceKey("default", svc)
		before[k] = builds(k)
	}

	// West relists first, and its list hangs: it holds the turn.
	west.holdLists()
	west.expire()
	waitFor(t, 5*time.Second, "west's first relist in its list", func() bool { return west.waiting() == 1 })
	assert.EqualValues(t, 1, testutil.ToFloat64(relistsActive), "relist_in_progress during a relist")
	// Paris relists too, and a slice changes while it waits.
	parisLists := paris.listed()
	paris.expire()
	waitFor(t, 5*time.Second, "every watch's relist at the gate", func() bool { active, _ := m.watch.relists.stats(); return active == 2*linkWatches })
	paris.api.put(flatSlice("web-1", "web", "10.2.0.9"))
	require.True(t, m.watch.HasSynced(), "not ready while relisting")
	assert.Equal(t, parisLists, paris.listed(), "watch-lists of paris, asked while west held the turn")
	assert.Equal(t, linkWatches+1, west.listed(), "watch-lists of west: the first lists and the held relist")
	// The last known state is answered meanwhile.
	assert.True(t, answersA(t, m, "web-paris"+z, "10.2.0.1")(), "paris's last known state not answered while it waits")

	west.let()
	waitFor(t, 10*time.Second, "every relist done", func() bool { return gateStats(m.watch.relists) == [2]int{0, 2 * linkWatches} })
	waitFor(t, 5*time.Second, "paris's change answered", answersA(t, m, "web-paris"+z, "10.2.0.9"))
	waitFor(t, 5*time.Second, "the groups built", idle(m))
	assert.EqualValues(t, 0, testutil.ToFloat64(relistsActive), "relist_in_progress after the relists")
	for name, p := range map[string]*relistProxy{"west": west, "paris": paris} {
		assert.Equal(t, 2*linkWatches, p.listed(), "watch-lists %s served: %d first lists, %[2]d relists", name, linkWatches)
	}
	assert.Same(t, dbSvc, held(pc.services, "db"), "the unchanged Service db was replaced by the relist")
	assert.Same(t, dbSlice, held(pc.slices[0], "db-1"), "the unchanged slice db-1 was replaced by the relist")
	assert.NotSame(t, webSlice, held(pc.slices[0], "web-1"), "the changed slice web-1 was not replaced")
	for k, n := range before {
		got := builds(k) - n
		switch {
		case k.Svc == "web" && got == 0:
			t.Error("the changed group web was not rebuilt")
		case k.Svc != "web" && got != 0:
			t.Errorf("group %s rebuilt %d times by a relist that changed nothing in it", k.Svc, got)
		}
	}
}

// A first list never waits for the gate, even while a relist holds it:
// the cold start lists every link at once.
func TestFirstListsNotGated(t *testing.T) {
	west := remotetest.NewClientset(service("api", flatExport, corev1.ClusterIPNone), flatSlice("api-1", "api", "10.1.0.1"))
	api := newRelistProxy(t, service("web", flatExport, corev1.ClusterIPNone),
		flatSlice("web-1", "web", "10.2.0.1"))
	m := newStack(t, remotetest.NewClientset(), Options{StartupTimeout: 5 * time.Second})
	sl := m.watch.relists.acquire(context.Background(), "test")
	defer sl.release()
	m.link(t, "west", west, "paris", api.client(t))
	m.start(t)
	waitFor(t, 5*time.Second, "every link listed while the gate is held", func() bool {
		return answersA(t, m, "api-west"+z, "10.1.0.1")() && answersA(t, m, "web-paris"+z, "10.2.0.1")()
	})
}

// The gate: one holder at a time, in turn; a holder that does not end
// gives the turn up after maxHold; a waiter whose context ends leaves.
func TestRelistGate(t *testing.T) {
	var busy []bool
	var mu sync.Mutex
	g := newRelistGate(func(b bool) { mu.Lock(); busy = append(busy, b); mu.Unlock() })
	g.maxHold = time.Hour
	ctx := context.Background()
	a := g.acquire(ctx, "a")
	var got atomic.Pointer[relistSlot]
	done := make(chan struct{})
	go func() { got.Store(g.acquire(ctx, "b")); close(done) }()
	waitFor(t, 5*time.Second, "b waiting", func() bool { active, _ := g.stats(); return active == 2 })
	require.Nil(t, got.Load(), "b got the slot while a held it")
	// A waiter whose context ends leaves, without the slot.
	cctx, cancel := context.WithCancel(ctx)
	cdone := make(chan *relistSlot)
	go func() { cdone <- g.acquire(cctx, "c") }()
	waitFor(t, 5*time.Second, "c waiting", func() bool { active, _ := g.stats(); return active == 3 })
	cancel()
	require.Nil(t, <-cdone, "c got a slot after its context ended")
	a.release()
	a.release() // twice is once
	<-done
	b := got.Load()
	require.NotNil(t, b, "b got no slot")
	assert.Equal(t, [2]int{1, 2}, gateStats(g), "stats: active, held")
	b.release()
	mu.Lock()
	assert.False(t, len(busy) != 2 || !busy[0] || busy[1], "busy told %v, want [true false]", busy)
	mu.Unlock()

	// A holder that hangs: the next one starts after maxHold.
	g.maxHold = 50 * time.Millisecond
	h := g.acquire(ctx, "hangs")
	start := time.Now()
	n := g.acquire(ctx, "next")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "when next started after the hanging one: not before maxHold")
	h.release() // late: gives back nothing twice
	n.release()
	assert.Zero(t, first(g.stats()), "active after every release")
	// The slot is free.
	select {
	case g.slot <- struct{}{}:
		<-g.slot
	default:
		t.Error("the slot is held after every release")
	}
}

// A relist whose list fails gives its turn back, and its retry waits for
// a turn again: it never runs beside the relist that holds the turn.
func TestRelistRetryWaitsItsTurn(t *testing.T) {
	west := newRelistProxy(t, service("api", flatExport, corev1.ClusterIPNone),
		flatSlice("api-1", "api", "10.1.0.1"))
	paris := newRelistProxy(t, service("web", flatExport, corev1.ClusterIPNone),
		flatSlice("web-1", "web", "10.2.0.1"))
	m, _ := startCounting(t, "west", west.client(t), "paris", paris.client(t))
	waitFor(t, 5*time.Second, "the first answers", func() bool {
		return answersA(t, m, "api-west"+z, "10.1.0.1")() && answersA(t, m, "web-paris"+z, "10.2.0.1")()
	})
	west.holdLists()
	west.expire()
	waitFor(t, 5*time.Second, "west's first relist in its list", func() bool { return west.waiting() == 1 })
	parisLists := paris.listed()
	paris.holdLists()
	paris.expire()
	waitFor(t, 5*time.Second, "every watch's relist at the gate", func() bool { active, _ := m.watch.relists.stats(); return active == 2*linkWatches })

	// West's held list fails (its stream ends before any object): the turn
	// goes to the next relist, and the failed one's retry (a watch-list or
	// a plain list) waits at the gate again, not beside the one in its
	// list.
	plain := west.plainLists() + paris.plainLists()
	westLists := west.listed()
	west.expire()
	waitFor(t, 10*time.Second, "the turn handed on, the failed relist back at the gate", func() bool { return gateStats(m.watch.relists) == [2]int{2 * linkWatches, 2} })
	waitFor(t, 5*time.Second, "the next relist in its list", func() bool { return west.waiting()+paris.waiting() == 1 })
	w, p := west.waiting(), paris.waiting()
	active, held := m.watch.relists.stats()
	assert.False(t, active != 2*linkWatches || held != 2 || w+p != 1,
		"%d relists active, %d given the turn, %d in their lists (west %d, paris %d); want %d, 2, 1", active, held, w+p, w, p, 2*linkWatches)
	wl, pl := west.listed(), paris.listed()
	plain = west.plainLists() + paris.plainLists() - plain
	assert.False(t, plain != 0 || wl+pl-westLists-parisLists != 1, "%d lists and %d watch-lists asked since the failure, while one relist holds the turn; want 0 and 1", plain, wl+pl-westLists-parisLists)
	paris.let()
	west.let()
	waitFor(t, 10*time.Second, "every relist done", func() bool { active, _ := m.watch.relists.stats(); return active == 0 })
	waitFor(t, 5*time.Second, "west answered", answersA(t, m, "api-west"+z, "10.1.0.1"))
	assert.Equal(t, parisLists+linkWatches, paris.listed(), "watch-lists of paris: one relist each")
}

package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// gen is a Generation whose sync the test decides.
type gen struct {
	id      int
	started atomic.Bool
	synced  atomic.Bool
	ctx     atomic.Pointer[context.Context]
}

func (g *gen) Start(ctx context.Context) { g.ctx.Store(&ctx); g.started.Store(true) }
func (g *gen) HasSynced() bool           { return g.synced.Load() }

// stopped reports whether g's watches were told to stop.
func (g *gen) stopped() bool {
	ctx := g.ctx.Load()
	return ctx != nil && (*ctx).Err() != nil
}

// record is a Consumer that records what it is told.
type record struct {
	mu    sync.Mutex
	n     int
	gens  []*gen
	calls []string
}

func (r *record) New(name string, _ kubernetes.Interface, _ link.Namespaces, replacement bool) *gen {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	g := &gen{id: r.n}
	r.gens = append(r.gens, g)
	r.calls = append(r.calls, fmt.Sprintf("new %s %d replacement=%t", name, g.id, replacement))
	return g
}

func (r *record) Serve(name string, g, old *gen, replaced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if replaced {
		r.calls = append(r.calls, fmt.Sprintf("serve %s %d after %d (stopped %t)", name, g.id, old.id, old.stopped()))
		return
	}
	r.calls = append(r.calls, fmt.Sprintf("serve %s %d", name, g.id))
}

func (r *record) Stop(name string, g *gen, removed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("stop %s %d removed=%t (stopped %t)", name, g.id, removed, g.stopped()))
}

func (r *record) told() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *record) gen(id int) *gen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gens[id-1]
}

// started returns links of a record in cluster east, started until the
// test ends.
func started(t *testing.T) (*record, *Links[*gen]) {
	r := &record{}
	l := NewLinks[*gen]("east", r)
	l.Start(t.Context())
	return r, l
}

// A link serves at once; a new kubeconfig of a running link is watched
// beside the old one, which serves until the new one has synced; one
// replaced again before it synced stops without serving; a removed link
// stops what serves and what was syncing.
func TestLinksLifecycle(t *testing.T) {
	r := &record{}
	l := NewLinks[*gen]("east", r)
	l.AddClient("east", fake.NewClientset())
	l.AddClient("west", fake.NewClientset())
	l.AddClient("paris", fake.NewClientset())
	assert.Equal(t, []string{"paris", "west"}, l.Names())
	assert.False(t, r.gen(1).started.Load(), "nothing runs before Start")

	l.Start(t.Context())
	assert.True(t, r.gen(1).started.Load())
	assert.True(t, r.gen(2).started.Load())

	// A new kubeconfig for west: 3 runs beside 1, which serves.
	l.AddClient("west", fake.NewClientset())
	require.True(t, r.gen(3).started.Load())
	g, _ := l.Get("west")
	assert.Equal(t, 1, g.id, "the old watches serve until the new ones sync")
	// Another before 3 synced: 3 gives way to 4.
	l.AddClient("west", fake.NewClientset())
	r.gen(3).synced.Store(true)
	r.gen(4).synced.Store(true)
	require.Eventually(t, func() bool { g, _ := l.Get("west"); return g.id == 4 }, 10*time.Second, time.Millisecond)

	l.Remove("west")
	l.Remove("west")
	_, ok := l.Get("west")
	assert.False(t, ok)
	assert.Equal(t, []string{"paris"}, l.Names())
	assert.Equal(t, []string{
		"new west 1 replacement=false",
		"serve west 1",
		"new paris 2 replacement=false",
		"serve paris 2",
		"new west 3 replacement=true",
		"new west 4 replacement=true",
		"stop west 3 removed=false (stopped true)",
		"serve west 4 after 1 (stopped true)",
		"stop west 4 removed=true (stopped true)",
	}, r.told())
	assert.False(t, r.gen(2).stopped(), "another link runs on")
}

// A replacement that never syncs never serves, and stops with its link.
func TestLinksReplacementNeverSynced(t *testing.T) {
	r, l := started(t)
	l.AddClient("west", fake.NewClientset())
	l.AddClient("west", fake.NewClientset())
	g, _ := l.Get("west")
	assert.Equal(t, 1, g.id)
	l.Remove("west")
	assert.Equal(t, []string{
		"new west 1 replacement=false",
		"serve west 1",
		"new west 2 replacement=true",
		"stop west 2 removed=false (stopped true)",
		"stop west 1 removed=true (stopped true)",
	}, r.told())
}

// Stop stops what serves and what syncs, and removes nothing.
func TestLinksStop(t *testing.T) {
	r, l := started(t)
	l.AddClient("west", fake.NewClientset())
	l.AddClient("west", fake.NewClientset())
	l.Stop()
	assert.Equal(t, []string{"west"}, l.Names())
	assert.Equal(t, []string{
		"new west 1 replacement=false",
		"serve west 1",
		"new west 2 replacement=true",
		"stop west 2 removed=false (stopped true)",
		"stop west 1 removed=false (stopped true)",
	}, r.told())
}

// Before Start, a new kubeconfig replaces the old at once: nothing runs
// to keep serving.
func TestLinksReplacedBeforeStart(t *testing.T) {
	r := &record{}
	l := NewLinks[*gen]("east", r)
	l.AddClient("west", fake.NewClientset())
	l.AddClient("west", fake.NewClientset())
	g, _ := l.Get("west")
	assert.Equal(t, 2, g.id)
	assert.Equal(t, []string{"west"}, l.Names())
	assert.Equal(t, []string{
		"new west 1 replacement=false",
		"serve west 1",
		"new west 2 replacement=true",
		"serve west 2 after 1 (stopped false)",
	}, r.told())
}

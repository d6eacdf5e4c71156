package watch

import (
	"context"
	"sync"
	"time"
)

// Relists, one at a time. A reflector lists again (a relist) when its watch
// cannot resume: the API server restarted, its watch cache moved on, or the
// watch was closed for too long. While a store relists, the plugin holds its
// old objects, the new list streaming in, and the decoded objects the list
// leaves behind as garbage; when every link relists at once (an API server
// upgrade across the fleet, or the plugin's network coming back), that is
// ten of them at once. The relistGate lets one store relist at a time, from
// the start of its list request to its Replace; the others wait, serving
// their last known state meanwhile. First lists are never gated: the cold
// start lists every link at once.
type relistGate struct {
	// slot is the semaphore: holding the one value is relisting.
	slot chan struct{}
	// maxHold bounds how long one relist holds the slot: a list that
	// hangs (an API server that accepts and never answers) must not hold
	// every other link's relist. Past it, the next relist starts.
	maxHold time.Duration
	// busy is told true when the first relist begins waiting, false when
	// the last one ends (under mu, so in order).
	busy func(bool)

	mu     sync.Mutex
	active int // relists waiting for the slot or holding it
	// held counts relists given the slot, for tests and the log.
	held int
}

// relistMaxHold is how long a relist holds the slot at most: a relist of
// 20,000 objects streams in 1 to 2 s; a list that has not answered in
// noAnswerAfter (15 s) is reported unreachable, so a longer hold is a link
// that hangs.
var relistMaxHold = 20 * time.Second

func newRelistGate(busy func(bool)) *relistGate {
	return &relistGate{slot: make(chan struct{}, 1), maxHold: relistMaxHold, busy: busy}
}

// relistSlot is one relist's hold of the gate; release ends it, once.
type relistSlot struct {
	g     *relistGate
	once  sync.Once
	timer *time.Timer
	// freeOnce gives the slot back to the gate once: at release, or at
	// maxHold.
	freeOnce sync.Once
}

// acquire waits for the slot for the relist of what (for the log), or for
// ctx; nil when ctx ended first.
func (g *relistGate) acquire(ctx context.Context, what string) *relistSlot {
	g.mu.Lock()
	g.active++
	if g.active == 1 && g.busy != nil {
		g.busy(true)
	}
	g.mu.Unlock()
	select {
	case g.slot <- struct{}{}:
	case <-ctx.Done():
		g.end()
		return nil
	}
	g.mu.Lock()
	g.held++
	g.mu.Unlock()
	sl := &relistSlot{g: g}
	sl.timer = time.AfterFunc(g.maxHold, func() {
		log.Warningf("Relist of %s: not done after %s; the next relist starts beside it", what, g.maxHold)
		sl.free()
	})
	return sl
}

// free gives the slot back to the gate, once.
func (sl *relistSlot) free() {
	sl.freeOnce.Do(func() { <-sl.g.slot })
}

// release ends the relist: the slot goes back (unless maxHold already
// gave it), and the relist no longer counts as active. Safe to call more
// than once, and on nil.
func (sl *relistSlot) release() {
	if sl == nil {
		return
	}
	sl.once.Do(func() {
		sl.timer.Stop()
		sl.free()
		sl.g.end()
	})
}

// end counts out one relist.
func (g *relistGate) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
	if g.active == 0 && g.busy != nil {
		g.busy(false)
	}
}

// relistBusy is a relistGate's busy: relist_in_progress is 1 while any
// relist waits or runs. Memory meanwhile is bounded by the Deployment's
// GOMEMLIMIT: a plugin leaves the process's GC settings alone.
func relistBusy(busy bool) {
	if busy {
		relistsActive.Set(1)
	} else {
		relistsActive.Set(0)
	}
}

// stats returns the relists waiting or holding the slot, and those given
// the slot so far.
func (g *relistGate) stats() (active, held int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.active, g.held
}

package mcmirror

import (
	"runtime/debug"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The GC target during relists. With GOGC=100 the heap may grow to twice
// what was live after the last collection before the next one: a steady
// heap H reaches 2H in a phase that makes garbage fast, which a relist does
// (every listed object is decoded whole, then trimmed). While any relist of
// any link is in progress (waiting for its turn or listing), the GC target
// is lowered to relistGCPercent, and restored when the last one ends: the
// heap stays within about (1 + relistGCPercent/100) of what is live, at the
// cost of more frequent collections during the relist only. Queries
// outside a relist are not affected. A GOGC the operator set lower than
// relistGCPercent, or off, is left alone.

// relistGCPercent is the GC target (GOGC) while a relist is in progress.
var relistGCPercent = 20

var relistGC struct {
	mu      sync.Mutex
	n       int  // gates with a relist in progress
	prev    int  // the GC target to restore
	lowered bool // whether this code lowered it
}

// relistsActive is 1 while a relist is in progress (the GC target lowered).
var relistsActive = promauto.NewGauge(prometheus.GaugeOpts{
	Namespace: plugin.Namespace,
	Subsystem: "mcmirror",
	Name:      "relist_in_progress",
	Help:      "1 while a linked or local cluster relists (its watch could not resume), waiting for its turn or listing; relists run one at a time, with a lower GC target.",
})

// relistGCBusy lowers the GC target when the first gate starts relisting
// and restores it when the last one stops; it is a relistGate's busy.
func relistGCBusy(busy bool) {
	relistGC.mu.Lock()
	defer relistGC.mu.Unlock()
	if busy {
		relistGC.n++
		if relistGC.n > 1 {
			return
		}
		relistsActive.Set(1)
		prev := debug.SetGCPercent(relistGCPercent)
		if prev < 0 || prev <= relistGCPercent {
			debug.SetGCPercent(prev) // off, or already lower: the operator's
			return
		}
		relistGC.prev, relistGC.lowered = prev, true
		return
	}
	relistGC.n--
	if relistGC.n > 0 {
		return
	}
	relistsActive.Set(0)
	if relistGC.lowered {
		debug.SetGCPercent(relistGC.prev)
		relistGC.lowered = false
	}
}

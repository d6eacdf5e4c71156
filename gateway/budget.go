package gateway

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// The budget of grown copy buffers. A direction holds the smallest buffer
// (1 KB) whatever happens; a larger one (16 KB, 256 KB) only while it can
// reserve the bytes from one process-wide budget. A stream over budget
// keeps copying with the small buffer, slower but correct, so that the
// memory the copy buffers pin is bounded even when every reader stops
// reading (a buffer waiting for a Write to finish cannot be given back).
// The reservation is the size of the buffer a direction holds, from the
// grow until the shrink or the end of the stream.

// DefaultBufferBudget is the budget without --buffer-budget: a quarter of
// the memory limit of the process's cgroup, a container's limits.memory
// (cgroup v2 or v1, as automemlimit finds it), else 256 MiB. A quarter,
// because the streams themselves need the rest: each held about 29 KiB
// idle (TLS state, goroutines, 1 KB buffers, which idle directions give
// back), and under many stalled readers about 45 KiB was measured (9,000
// streams through one gateway, deploy/README.md, Sizing).
func DefaultBufferBudget() int64 {
	if limit, err := memlimit.FromCgroup(); err == nil && limit > 0 && limit <= math.MaxInt64 {
		return int64(limit / 4)
	}
	return 256 << 20
}

// budget bounds the bytes reserved by grown buffers.
type budget struct {
	// limit is the bound in bytes set by SetBufferBudget; 0: def.
	limit atomic.Int64
	// def is DefaultBufferBudget, read once, when first needed.
	once sync.Once
	def  int64
	used atomic.Int64
}

// bufBudget is the process's budget, shared by the ingress and the egress:
// they share the memory.
var bufBudget budget

// SetBufferBudget sets the budget of grown copy buffers, in bytes; 0
// restores the default. A budget under 16 KB grows no buffer.
func SetBufferBudget(n int64) {
	bufBudget.limit.Store(n)
	bufBudgetBytes.Set(float64(bufBudget.max()))
}

func (b *budget) max() int64 {
	if n := b.limit.Load(); n > 0 {
		return n
	}
	b.once.Do(func() {
		b.def = DefaultBufferBudget()
		bufBudgetBytes.Set(float64(b.def))
	})
	return b.def
}

// reserve takes n bytes from the budget if they are all there, and reports
// whether it did; a refusal is counted.
func (b *budget) reserve(n int64) bool {
	limit := b.max()
	for {
		used := b.used.Load()
		if used+n > limit {
			bufGrowsRefused.Inc()
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			bufReserved.Add(float64(n))
			return true
		}
	}
}

// release gives back n bytes reserved. The gauge goes down first, so that
// it never reads more than the budget.
func (b *budget) release(n int64) {
	bufReserved.Sub(float64(n))
	b.used.Add(-n)
}

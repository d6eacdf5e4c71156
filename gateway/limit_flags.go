package gateway

import (
	"flag"
	"fmt"
	"strconv"
)

// LimitFlags are the gateway's flags of what one source may hold (README.md,
// "Abuse"): the budget of grown copy buffers, and the connections of one
// client address (egress) and of one peer cluster (ingress).
type LimitFlags struct {
	perSource, perPeer int
}

// RegisterLimitFlags adds --buffer-budget, --max-connections-per-source and
// --max-connections-per-peer to fs. --buffer-budget takes effect as it is
// parsed: the budget is the process's.
func RegisterLimitFlags(fs *flag.FlagSet) *LimitFlags {
	l := &LimitFlags{perSource: 1024}
	fs.Func("buffer-budget", "bytes of grown copy buffers (16 KB, 256 KB) all streams may hold; over it a stream copies with 1 KB buffers (default: a quarter of the container's memory limit, cgroup v2 memory.max or v1 memory.limit_in_bytes, else 256 MiB)", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1<<20 {
			return fmt.Errorf("want a number of bytes, at least 1048576")
		}
		SetBufferBudget(n)
		return nil
	})
	fs.IntVar(&l.perSource, "max-connections-per-source", l.perSource, "concurrent egress connections of one client address; one more is reset (0: no bound but --max-connections)")
	fs.IntVar(&l.perPeer, "max-connections-per-peer", 0, "concurrent ingress streams of one peer cluster; one more is answered 503 (0: no bound but --max-connections)")
	return l
}

// ConfigureIngress gives in the per-peer bound; call it before in serves.
func (l *LimitFlags) ConfigureIngress(in *Ingress) { in.MaxConnsPerPeer = max(l.perPeer, 0) }

// ConfigureEgress gives e the per-source bound; call it before e runs.
func (l *LimitFlags) ConfigureEgress(e *Egress) {
	e.MaxConnsPerSource = l.perSource
	if l.perSource <= 0 {
		e.MaxConnsPerSource = -1 // none
	}
}

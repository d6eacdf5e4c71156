package main

import (
	"fmt"
	"strings"
)

// perQueryRows returns the rows of the targets table for the plugin's
// per-query Go benchmarks in gb: every name form of BenchmarkServeDNS
// against the target (≤ 1 µs and ≤ 3 allocations, the reply fitted and
// packed by the server's writer), and, from BenchmarkWriteReply, which
// forms the server's writer alone takes past 1 µs (no plugin answering
// that reply can meet the target) and the plugin's own share of each.
func perQueryRows(gb []goBench) []string {
	writer := map[string]goBench{}
	for _, g := range gb {
		if f, ok := strings.CutPrefix(g.name, "BenchmarkWriteReply/"); ok {
			writer[f] = g
		}
	}
	var missed, writerOver []string
	forms, met, shared := 0, 0, 0
	ownNS, ownAllocs, ownName, ownAllocName := 0.0, 0.0, "", ""
	for _, g := range gb {
		f, ok := strings.CutPrefix(g.name, "BenchmarkServeDNS/")
		if !ok {
			continue
		}
		forms++
		if g.ns <= 1000 && g.allocs <= 3 {
			met++
		} else {
			missed = append(missed, fmt.Sprintf("%s %.0f ns, %.0f allocs", f, g.ns, g.allocs))
		}
		w, ok := writer[f]
		if !ok {
			continue
		}
		shared++
		if w.ns > 1000 {
			writerOver = append(writerOver, fmt.Sprintf("%s %.0f ns", f, w.ns))
		}
		if d := g.ns - w.ns; d > ownNS {
			ownNS, ownName = d, f
		}
		if d := g.allocs - w.allocs; d > ownAllocs || ownAllocName == "" {
			ownAllocs, ownAllocName = d, f
		}
	}
	if forms == 0 {
		return nil
	}
	measured := fmt.Sprintf("met by %d of %d forms", met, forms)
	if len(missed) > 0 {
		measured += "; missed by " + strings.Join(missed, "; ")
	}
	rows := []string{fmt.Sprintf("| ≤ 1 µs and ≤ 3 allocs per query (ServeDNS, reply fitted and packed by the server's writer, %d forms) | %s | %s |",
		forms, measured, yesNo(met == forms))}
	if shared > 0 {
		over := "no form"
		if len(writerOver) > 0 {
			over = strings.Join(writerOver, "; ")
		}
		rows = append(rows, fmt.Sprintf("| the server's writer alone on the same replies (BenchmarkWriteReply), %d forms | over 1 µs: %s. The plugin's own share (ServeDNS less the writer) at most %.0f ns (%s), %.0f allocs (%s) | not the target: no plugin answering these replies costs less than the writer |",
			shared, over, ownNS, ownName, ownAllocs, ownAllocName))
	}
	return rows
}

package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// abTable is the table format of the same-run A/B comparisons recorded in
// bench/README.md, for the next such comparison.

// abSide is one column of an A/B table: a setup's key and name.
type abSide struct{ key, name string }

// abTable writes one measure's values per run (direct's first, when v
// has them) and each gateway pair's ratio to HAProxy's within the run, the
// last of pairs; for round trips the ratio is of the time added to
// direct's.
func abTable(b *strings.Builder, key, title, unit string, v map[string][]float64, pairs []abSide, runs int) {
	d, direct := v["direct"]
	fmt.Fprintf(b, "%s (%s):\n\n| run |", title, unit)
	if direct {
		b.WriteString(" direct |")
	}
	for _, s := range pairs {
		fmt.Fprintf(b, " %s |", s.key)
	}
	for _, s := range pairs[:len(pairs)-1] {
		if key == "rr" {
			fmt.Fprintf(b, " added %s ÷ HAProxy |", s.key)
		} else {
			fmt.Fprintf(b, " %s ÷ HAProxy |", s.key)
		}
	}
	b.WriteString("\n|---|")
	if direct {
		b.WriteString("---:|")
	}
	b.WriteString(strings.Repeat("---:|", 2*len(pairs)-1) + "\n")
	ratios := map[string][]float64{}
	for r := range runs {
		fmt.Fprintf(b, "| %d |", r+1)
		if direct {
			fmt.Fprintf(b, " %.1f |", d[r])
		}
		for _, s := range pairs {
			fmt.Fprintf(b, " %.1f |", v[s.key][r])
		}
		h := v["haproxy"][r]
		for _, s := range pairs[:len(pairs)-1] {
			x := v[s.key][r] / h
			if key == "rr" {
				x = (v[s.key][r] - d[r]) / (h - d[r])
			}
			fmt.Fprintf(b, " %.3f |", x)
			if !math.IsNaN(x) {
				ratios[s.key] = append(ratios[s.key], x)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, s := range pairs[:len(pairs)-1] {
		st := stats.Of(ratios[s.key])
		fmt.Fprintf(b, "- %s, %s ÷ HAProxy: median %.3f (%.3f–%.3f) over %d runs\n", key, s.name, st.Med, st.Min, st.Max, len(ratios[s.key]))
	}
	b.WriteString("\n")
}

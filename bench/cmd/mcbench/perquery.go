package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
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
		if !missesPerQuery(g) {
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

// missesPerQuery reports whether a BenchmarkServeDNS figure misses the
// per-query target.
func missesPerQuery(g goBench) bool { return g.ns > 1000 || g.allocs > 3 }

// missedForms returns the forms of BenchmarkServeDNS in gb that miss the
// per-query target, with their figures.
func missedForms(gb []goBench) []goBench {
	var out []goBench
	for _, g := range gb {
		if f, ok := strings.CutPrefix(g.name, "BenchmarkServeDNS/"); ok && missesPerQuery(g) {
			g.name = f
			out = append(out, g)
		}
	}
	return out
}

// formProfile is the CPU profile of one form of BenchmarkServeDNS: the
// cumulative share of the profile's samples of each function
// (`go tool pprof -top -cum`), or why there is none.
type formProfile struct {
	bench  goBench
	path   string
	shares map[string]float64
	err    string
}

// formParts are the parts of a query formProfileRows shows, each as a
// share of ServeDNS's own samples: the server's writer (and, of it,
// fitting the reply to the client's buffer and packing it), the plugin's
// lookup and the answer it makes, and allocation wherever it happens.
var formParts = []struct{ fn, what string }{
	{"request.(*ScrubWriter).WriteMsg", "server's writer"},
	{"dns.(*Msg).Truncate", "of which fitting (Truncate)"},
	{"dns.(*Msg).PackBuffer", "of which packing"},
	{"index.(*Index).Find", "plugin: lookup"},
	{"mcmirror.answer", "plugin: answer made"},
	{"runtime.mallocgc", "allocation"},
}

// profileForms takes a CPU profile of each form in forms, running
// BenchmarkServeDNS of the plugin's test binary testBin for that form
// alone for benchtime, into out/perquery.<form>.cpu.pprof.
func profileForms(testBin, out, benchtime string, forms []goBench) []formProfile {
	var profs []formProfile
	for _, g := range forms {
		prof := formProfile{bench: g, path: filepath.Join(out, "perquery."+strings.ReplaceAll(g.name, "/", "_")+".cpu.pprof")}
		pattern := "^BenchmarkServeDNS$"
		for _, part := range strings.Split(g.name, "/") {
			pattern += "/^" + regexp.QuoteMeta(part) + "$"
		}
		cmd := exec.Command(testBin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime, "-test.cpuprofile", prof.path)
		pprof := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=500", testBin, prof.path)
		if b, err := cmd.CombinedOutput(); err != nil {
			prof.err = fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(b)))
		} else if top, err := pprof.Output(); err != nil {
			prof.err = fmt.Sprintf("pprof: %v", err)
		} else {
			prof.shares = cumShares(string(top))
		}
		profs = append(profs, prof)
	}
	return profs
}

// formProfileRows returns the rows of a table of profs: for each form, its
// figure and each of formParts as a share of ServeDNS's samples, with the
// nanoseconds that share is of the form's time per query.
func formProfileRows(profs []formProfile) []string {
	var rows []string
	for _, prof := range profs {
		row := fmt.Sprintf("| %s | %.0f ns, %.0f allocs |", prof.bench.name, prof.bench.ns, prof.bench.allocs)
		total := prof.shares["mcmirror.(*MCMirror).ServeDNS"]
		if prof.err != "" || total == 0 {
			why := prof.err
			if why == "" {
				why = "no ServeDNS samples"
			}
			rows = append(rows, row+" not profiled: "+why+strings.Repeat(" |", len(formParts)))
			continue
		}
		for _, part := range formParts {
			v := prof.shares[part.fn] / total
			row += fmt.Sprintf(" %.0f %% (%.0f ns) |", 100*v, v*prof.bench.ns)
		}
		rows = append(rows, row)
	}
	return rows
}

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// The -rr-only mode: round trips alone, for the one target that depends on
// wake-ups rather than on copying (or, with -rr-measures, other measures
// too, to check that a change for round trips costs nothing elsewhere). It
// measures direct, the gateway pair and the HAProxy pair (and, with -rr-b or
// -rr-b-env, a second gateway pair from another binary or environment) in
// interleaved runs, reports each gateway pair against HAProxy's within each
// run, and with -rr-count what the proxies do per round trip: context
// switches, threads, CPU, and system calls. -rr-measures mem, alone, runs
// the memory measure instead, on fresh proxies each run (memoryAB). It
// writes <out>/rr.md.

type rrOnlyConfig struct {
	on       bool
	bin      string // coredns-mc of the second gateway pair
	env      string // KEY=VALUE,... for the second gateway pair
	count    bool
	measures string // comma-separated measure keys
}

// abValue is the figure of a measure compared between pairs: the p50 added
// to direct's for round trips (a ratio below 1 is better), the rate for
// the others (above 1 is better).
func abValue(key string, s sample) float64 {
	switch key {
	case "rr":
		return s.res.P50
	case "connrate":
		return s.connsPerSec()
	}
	return s.mbps()
}

// abPair is the second gateway pair of -rr-only: its coredns-mc binary,
// environment and name.
type abPair struct {
	bin, name string
	env       []string
}

func rrOnly(cfg *config, w *world, dir, gw, hap *setup) int {
	defer gw.stop()
	defer hap.stop()
	var ab *abPair
	if cfg.rr.bin != "" || cfg.rr.env != "" {
		ab = &abPair{bin: cfg.cmc}
		if cfg.rr.bin != "" {
			var err error
			if ab.bin, err = filepath.Abs(cfg.rr.bin); err != nil {
				logf("%v", err)
				return 1
			}
		}
		if cfg.rr.env != "" {
			ab.env = strings.Split(cfg.rr.env, ",")
		}
		ab.name = fmt.Sprintf("gateway pair B (%s %s)", filepath.Base(ab.bin), cfg.rr.env)
	}
	if cfg.rr.measures == "mem" {
		// Fresh proxies for every run, on the ports of the long-lived
		// ones.
		gw.stop()
		hap.stop()
		var b strings.Builder
		fmt.Fprintf(&b, "## Measures mem only (`bin/gwbench %s`), load %s\n\n", strings.Join(cfg.argv, " "), proc.LoadAvg())
		memoryAB(cfg, w, ab, &b)
		return writeRR(cfg, b.String())
	}
	pairs := []*setup{gw, hap}
	if ab != nil {
		b, err := startGatewayPairWith(cfg, w, "b", ab.bin, ab.env, "127.0.0.2")
		if err != nil {
			logf("second gateway pair: %v", err)
			return 1
		}
		defer b.stop()
		b.key, b.name = "gateway-b", ab.name
		pairs = []*setup{gw, b, hap}
	}
	var ms []measure
	for _, key := range strings.Split(cfg.rr.measures, ",") {
		i := slices.IndexFunc(measures, func(m measure) bool { return m.key == key })
		if i < 0 {
			logf("-rr-measures: no measure %q", key)
			return 1
		}
		ms = append(ms, measures[i])
	}
	all := append([]*setup{dir}, pairs...)
	for _, s := range all {
		_, _ = runClient(cfg, time.Minute, "-mode", "rr", "-size", strconv.Itoa(cfg.size), "-duration", "1s", "-addr", s.echo)
	}
	// values[measure][setup][run]
	values := map[string]map[string][]float64{}
	for _, m := range ms {
		values[m.key] = map[string][]float64{}
	}
	for r := range cfg.runs {
		for _, m := range ms {
			// Direct first, then the pairs in an order that rotates.
			order := []*setup{dir}
			for i := range pairs {
				order = append(order, pairs[(i+r)%len(pairs)])
			}
			for _, s := range order {
				smp := runOne(cfg, s, m)
				v := math.NaN()
				if smp.ok {
					v = abValue(m.key, smp)
				}
				values[m.key][s.key] = append(values[m.key][s.key], v)
				logf("  run %d/%d %-8s %-9s %s", r+1, cfg.runs, m.key, s.key, describe(m.key, smp))
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Measures %s only (`bin/gwbench %s`), load %s\n\n", cfg.rr.measures, strings.Join(cfg.argv, " "), proc.LoadAvg())
	for _, m := range ms {
		unit := "MB/s"
		switch m.key {
		case "rr":
			unit = "p50 µs"
		case "connrate":
			unit = "conn/s"
		}
		abTable(&b, m.key, m.title, unit, values[m.key], sidesOf(pairs), cfg.runs)
	}
	if cfg.rr.count {
		b.WriteString("\nPer round trip, both proxies of a pair, in one more round-trip run each (not counted above):\n\n")
		for _, s := range pairs {
			c, err := countSwitches(cfg, s)
			if err != nil {
				fmt.Fprintf(&b, "- %s: context switches not counted: %v\n", s.name, err)
			} else {
				fmt.Fprintf(&b, "- %s: %s\n", s.name, c)
			}
			sc, err := countSyscalls(cfg, s)
			if err != nil {
				fmt.Fprintf(&b, "- %s: system calls not counted: %v\n", s.name, err)
			} else {
				fmt.Fprintf(&b, "- %s (strace): %s\n", s.name, sc)
			}
		}
	}
	return writeRR(cfg, b.String())
}

// writeRR prints the report of -rr-only and writes it to <out>/rr.md.
func writeRR(cfg *config, text string) int {
	fmt.Println(text)
	if err := os.WriteFile(filepath.Join(cfg.out, "rr.md"), []byte(text), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}

// abSide is one column of an A/B table: a setup's key and name.
type abSide struct{ key, name string }

func sidesOf(setups []*setup) []abSide {
	out := make([]abSide, len(setups))
	for i, s := range setups {
		out[i] = abSide{s.key, s.name}
	}
	return out
}

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

// switchCount is what the kernel counted for every thread of both proxies
// of a pair during a round-trip run, per round trip.
type switchCount struct {
	vol, invol float64 // context switches: the thread waited / was preempted
	cpuUS      float64 // CPU microseconds of both proxies
	threads    int
	perThread  []float64 // switches of each thread that switched, most first
}

func (c *switchCount) String() string {
	parts := make([]string, len(c.perThread))
	for i, v := range c.perThread {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.2f context switches per round trip (%.2f voluntary, %.2f preempted), %d threads, per thread [%s], %.1f µs of proxy CPU",
		c.vol+c.invol, c.vol, c.invol, c.threads, strings.Join(parts, " "), c.cpuUS)
}

// taskSwitches reads the voluntary and involuntary context switches of
// every thread of pid: tid -> [2]int64.
func taskSwitches(pid int) (map[string][2]int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][2]int64{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue // the thread ended
		}
		var v [2]int64
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			n, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "voluntary_ctxt_switches:":
				v[0] = n
			case "nonvoluntary_ctxt_switches:":
				v[1] = n
			}
		}
		out[strconv.Itoa(pid)+"/"+e.Name()] = v
	}
	return out, nil
}

// countSwitches runs the round-trip load once on s and returns the context
// switches of its proxies per round trip.
func countSwitches(cfg *config, s *setup) (*switchCount, error) {
	read := func() (map[string][2]int64, error) {
		all := map[string][2]int64{}
		for _, p := range s.procs {
			t, err := taskSwitches(p.PID())
			if err != nil {
				return nil, err
			}
			for k, v := range t {
				all[k] = v
			}
		}
		return all, nil
	}
	before, err := read()
	if err != nil {
		return nil, err
	}
	cpu0 := s.cpu()
	res, err := runClient(cfg, time.Minute, "-mode", "rr", "-size", strconv.Itoa(cfg.size), "-duration", cfg.shortDur.String(), "-addr", s.echo)
	cpu := s.cpu() - cpu0
	after, rerr := read()
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if res.N == 0 {
		return nil, fmt.Errorf("no round trips")
	}
	n := float64(res.N + 200) // and the client's warm-up round trips
	c := &switchCount{threads: len(after), cpuUS: cpu / n * 1e6}
	for k, a := range after {
		b := before[k]
		dv, di := float64(a[0]-b[0])/n, float64(a[1]-b[1])/n
		c.vol += dv
		c.invol += di
		if dv+di >= 0.005 {
			c.perThread = append(c.perThread, dv+di)
		}
	}
	slices.Sort(c.perThread)
	slices.Reverse(c.perThread)
	return c, nil
}

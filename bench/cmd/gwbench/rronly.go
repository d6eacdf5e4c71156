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
)

// The -rr-only mode: round trips alone, for the one target that depends on
// wake-ups rather than on copying. It measures direct, the gateway pair and
// the HAProxy pair (and, with -rr-b or -rr-b-env, a second gateway pair from
// another binary or environment) in interleaved runs, reports the added p50
// of each pair against HAProxy's within each run, and with -rr-count what
// the proxies do per round trip: context switches, threads, CPU, and system
// calls. It writes <out>/rr.md.

// rrOnlyConfig holds the flags of the mode.
type rrOnlyConfig struct {
	on    bool
	bin   string // coredns-mc of the second gateway pair
	env   string // KEY=VALUE,... for the second gateway pair
	count bool
}

func rrMeasure() measure {
	for _, m := range measures {
		if m.key == "rr" {
			return m
		}
	}
	panic("no rr measure")
}

func rrOnly(cfg *config, w *world, dir, gw, hap *setup) int {
	defer gw.stop()
	defer hap.stop()
	pairs := []*setup{gw, hap}
	if cfg.rr.bin != "" || cfg.rr.env != "" {
		bin := cfg.cmc
		if cfg.rr.bin != "" {
			var err error
			if bin, err = filepath.Abs(cfg.rr.bin); err != nil {
				logf("%v", err)
				return 1
			}
		}
		var env []string
		if cfg.rr.env != "" {
			env = strings.Split(cfg.rr.env, ",")
		}
		b, err := startGatewayPairWith(cfg, w, "b", bin, env, "127.0.0.2")
		if err != nil {
			logf("second gateway pair: %v", err)
			return 1
		}
		defer b.stop()
		b.key, b.name = "gateway-b", fmt.Sprintf("gateway pair B (%s %s)", filepath.Base(bin), cfg.rr.env)
		pairs = []*setup{gw, b, hap}
	}
	m := rrMeasure()
	all := append([]*setup{dir}, pairs...)
	for _, s := range all {
		_, _ = runClient(cfg, time.Minute, "-mode", "rr", "-size", strconv.Itoa(cfg.size), "-duration", "1s", "-addr", s.echo)
	}
	p50 := map[string][]float64{}
	for r := range cfg.runs {
		// Direct first, then the pairs in an order that rotates.
		order := []*setup{dir}
		for i := range pairs {
			order = append(order, pairs[(i+r)%len(pairs)])
		}
		for _, s := range order {
			smp := runOne(cfg, s, m)
			v := math.NaN()
			if smp.ok {
				v = smp.res.P50
			}
			p50[s.key] = append(p50[s.key], v)
			logf("  run %d/%d rr %-9s %s", r+1, cfg.runs, s.key, describe("rr", smp))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Round trips only (`bin/gwbench %s`), load %s\n\n", strings.Join(cfg.argv, " "), loadavg())
	fmt.Fprintf(&b, "| run | direct p50 (µs) |")
	for _, s := range pairs {
		fmt.Fprintf(&b, " %s p50 |", s.key)
	}
	for _, s := range pairs[:len(pairs)-1] {
		fmt.Fprintf(&b, " added %s ÷ HAProxy |", s.key)
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", 2*len(pairs)-1) + "\n")
	ratios := map[string][]float64{}
	for r := range cfg.runs {
		d := p50["direct"][r]
		fmt.Fprintf(&b, "| %d | %.1f |", r+1, d)
		for _, s := range pairs {
			fmt.Fprintf(&b, " %.1f |", p50[s.key][r])
		}
		h := p50["haproxy"][r]
		for _, s := range pairs[:len(pairs)-1] {
			v := (p50[s.key][r] - d) / (h - d)
			fmt.Fprintf(&b, " %.3f |", v)
			if !math.IsNaN(v) {
				ratios[s.key] = append(ratios[s.key], v)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, s := range pairs[:len(pairs)-1] {
		st := summarize(ratios[s.key])
		fmt.Fprintf(&b, "- added p50, %s ÷ HAProxy: median %.3f (%.3f–%.3f) over %d runs\n", s.name, st.med, st.min, st.max, len(ratios[s.key]))
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
	fmt.Println(b.String())
	if err := os.WriteFile(filepath.Join(cfg.out, "rr.md"), []byte(b.String()), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
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
	slices.SortFunc(c.perThread, func(a, b float64) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	return c, nil
}

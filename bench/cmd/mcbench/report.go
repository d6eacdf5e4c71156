package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

type sizeResult struct {
	size, names int
	series      []*series
}

type report struct {
	cfg         *config
	start       time.Time
	sizes       []sizeResult
	profiles    []serverProfile
	heapProfile string
	prop        *latencies
	propErr     string
	memBase     memPoint
	mem         []memPoint
	memErr      string
	export      *latencies
	exportErr   string
	// exportRetries counts the controller's retried syncs during the
	// new-export measurement.
	exportRetries int
	cold          *coldResult
	coldErr       string
	// forms are the CPU profiles of the per-query forms that miss.
	forms []formProfile
}

func newReport(cfg *config) *report { return &report{cfg: cfg, start: time.Now().UTC()} }

func (r *report) throughput(size, names int, s []*series) {
	r.sizes = append(r.sizes, sizeResult{size, names, s})
}

func (sr *sizeResult) get(key string) *series {
	for _, s := range sr.series {
		if s.server.key == key {
			return s
		}
	}
	return nil
}

// ratio and cpuRatio are a's median ÷ b's, by qps and per CPU second; 0
// without both.
func ratio(a, b *series) float64    { return medianRatio(a, b, (*series).medianQPS) }
func cpuRatio(a, b *series) float64 { return medianRatio(a, b, (*series).medianPerCPU) }

func medianRatio(a, b *series, f func(*series) float64) float64 {
	if a == nil || b == nil || f(b) == 0 {
		return 0
	}
	return f(a) / f(b)
}

// runRatios returns a's qps ÷ b's qps and a's answers per CPU second ÷ b's,
// run by run (run i of a and run i of b were interleaved), for the runs
// where both counted.
func runRatios(a, b *series) (qps, cpu []float64) {
	for i := range min(len(a.runs), len(b.runs)) {
		x, y := a.runs[i], b.runs[i]
		if !x.valid || !y.valid || y.qps == 0 || y.serverCPU == 0 || x.serverCPU == 0 {
			continue
		}
		qps = append(qps, x.qps/y.qps)
		cpu = append(cpu, (float64(x.completed)/x.serverCPU)/(float64(y.completed)/y.serverCPU))
	}
	return qps, cpu
}

// ratioCells formats, for each server of as, the ratio of the medians to b
// and the spread of the run-by-run ratios, by qps and per CPU second.
func ratioCells(as []*series, b *series) string {
	var parts []string
	for _, a := range as {
		q, c := runRatios(a, b)
		parts = append(parts, fmt.Sprintf("%s %.2f× (runs %s), per CPU-s %.2f× (runs %s)", a.server.key,
			ratio(a, b), spread(q), cpuRatio(a, b), spread(c)))
	}
	return strings.Join(parts, "; ")
}

func spread(v []float64) string {
	if len(v) == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(v), slices.Max(v))
}

// verdict is "met" when the ratios of the medians and every run-by-run
// ratio of every server in as to b (by qps and per CPU second) are within
// [lo, hi] (hi 0: no upper bound), "**missed**" when none is, and "on the
// line" when they straddle the bound: a spread that crosses it is noise,
// not a result.
func verdict(as []*series, b *series, lo, hi float64) string {
	in, out := 0, 0
	for _, a := range as {
		q, c := runRatios(a, b)
		for _, x := range append(append([]float64{ratio(a, b), cpuRatio(a, b)}, q...), c...) {
			if x >= lo && (hi == 0 || x <= hi) {
				in++
			} else {
				out++
			}
		}
	}
	switch {
	case in+out == 0:
		return "not measured"
	case out == 0:
		return "met"
	case in == 0:
		return "**missed**"
	}
	return fmt.Sprintf("on the line (%d of %d ratios within)", in, in+out)
}

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// goBench is one line of `go test -bench` output.
type goBench struct {
	name              string
	ns, bytes, allocs float64
	// other are the benchmark's own metrics (index-B/endpoint, ...).
	other string
}

var (
	reBench  = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)
	reMetric = regexp.MustCompile(`([\d.]+) (\S+)`)
)

func readGoBench(path string) []goBench {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []goBench
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := reBench.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		b := goBench{name: m[1]}
		b.ns, _ = strconv.ParseFloat(m[2], 64)
		var other []string
		for _, mm := range reMetric.FindAllStringSubmatch(sc.Text()[len(m[0]):], -1) {
			v, _ := strconv.ParseFloat(mm[1], 64)
			switch mm[2] {
			case "B/op":
				b.bytes = v
			case "allocs/op":
				b.allocs = v
			default:
				other = append(other, mm[1]+" "+mm[2])
			}
		}
		b.other = strings.Join(other, ", ")
		out = append(out, b)
	}
	return out
}

func dnsperfVersion() string {
	out, _ := exec.Command("dnsperf", "-h").CombinedOutput()
	if m := regexp.MustCompile(`Version (\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "?"
}

func (r *report) String() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	fence := func(text string) { p("```\n%s\n```\n", strings.TrimSpace(text)) }
	cfg := r.cfg
	p("## mcbench results, %s\n", r.start.Format("2006-01-02 15:04 MST"))
	p("- machine: %s", proc.Machine())
	p("- command: `%s`, %.0f s for mcbench itself", strings.Join(os.Args, " "), time.Since(proc.Began).Seconds())
	p("- dnsperf %s, UDP, A queries, `-c 4 -q 100 -T 1`, %d interleaved runs of %s per server and size (A10 A1 Agw B C D, A10 A1 Agw B C D, ...) after a 1 s warm-up",
		dnsperfVersion(), cfg.runs, cfg.dur)
	p("- servers pinned to CPU %s (`taskset`, `GOMAXPROCS=1`), dnsperf to CPU %s; the API servers and etcd float; the machine is shared, so only the ratios within one table mean much",
		serverCPU, clientCPU)
	p("- a run counts only if 200 random names answered NOERROR with exactly the expected addresses before it and 50 after it, and dnsperf saw only NOERROR with at most 0.1%% lost\n")
	p("### Throughput\n")
	p("A10: `coredns-mc`, plugin mcmirror alone, 10 linked clusters (flat-mode exports, `<host>.<svc>-<cluster>` and `<svc>-global`); A1: the same records in 1 linked cluster; Agw: 10 linked clusters in gateway mode, `<svc>-<cluster>` answered with the local mirror's ClusterIP and `<svc>-global` with the 10 mirror ClusterIPs (the mirrors made by mcbench with the controller's labels), as many names as A10; B: plugin kubernetes alone, `<host>.<svc>` and `<svc>` of headless Services in the local cluster; C: plugin file, a zone with A10's records; D: a bare miekg/dns server answering from a map. Each Service has %d endpoints; each query file lists every name of its server once (endpoint names + Service names).\n", perSvc)
	p("qps is what dnsperf measured; q/CPU-s is answers per CPU second the server process used (from /proc, user+system), which corrects for the share of core %s the scheduler gave the server on a shared machine. The ratios are of the medians, qps first, q/CPU-s in brackets.\n", serverCPU)
	p("| endpoints | names | server | median qps | min–max qps | median q/CPU-s | server CPU | dnsperf CPU | valid runs | avg latency | ÷ B | ÷ D |")
	p("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, sr := range r.sizes {
		bs, ds := sr.get("B"), sr.get("D")
		for _, s := range sr.series {
			lo, hi := s.minMax()
			su, cu := s.medianUtil()
			p("| %d | %d | %s %s | %.0f | %.0f–%.0f | %.0f | %.0f%% | %.0f%% | %d/%d | %.3f ms | %.2f (%.2f) | %.2f (%.2f) |", sr.size, sr.names, s.server.key, s.server.what,
				s.medianQPS(), lo, hi, s.medianPerCPU(), 100*su, 100*cu, len(s.valid()), len(s.runs), s.medianLatency()*1e3,
				ratio(s, bs), cpuRatio(s, bs), ratio(s, ds), cpuRatio(s, ds))
		}
	}
	for _, sr := range r.sizes {
		for _, s := range sr.series {
			for i, run := range s.runs {
				if !run.valid {
					p("- size %d, %s, run %d did not count: %s", sr.size, s.server.key, i+1, run.why)
				}
			}
		}
	}
	p("")

	p("### Targets\n")
	p("| target | measured | |")
	p("| --- | --- | --- |")
	for _, sr := range r.sizes {
		bs, ds := sr.get("B"), sr.get("D")
		var as []*series
		for _, k := range []string{"A10", "A1", "Agw"} {
			if a := sr.get(k); a != nil {
				as = append(as, a)
			}
		}
		p("| A ≥ 1.5× B (%d endpoints) | %s | %s |", sr.size, ratioCells(as, bs), verdict(as, bs, 1.5, 0))
		p("| A ≥ 0.7× D (%d endpoints) | %s | %s |", sr.size, ratioCells(as, ds), verdict(as, ds, 0.7, 0))
		a10, a1 := sr.get("A10"), sr.get("A1")
		if a10 != nil && a1 != nil {
			p("| 10 clusters within 10%% of 1 (%d endpoints) | A10 ÷ A1: %s | %s |", sr.size, ratioCells([]*series{a10}, a1), verdict([]*series{a10}, a1, 0.9, 1.1))
		}
		if base := sr.get("A10base"); a10 != nil && base != nil {
			p("| this build against the -baseline build (%d endpoints) | A10 ÷ A10base: %s | a comparison, not a target |", sr.size, ratioCells([]*series{a10}, base))
		}
	}
	gb := readGoBench(goBenchFile)
	var lookup, syncOne *goBench
	for i, g := range gb {
		switch g.name {
		case "BenchmarkLookup":
			lookup = &gb[i]
		case "BenchmarkSyncOneEndpoint":
			syncOne = &gb[i]
		}
	}
	if lookup != nil {
		p("| ≤ 1 µs and ≤ 3 allocs per lookup (index) | %.0f ns, %.0f allocs (BenchmarkLookup) | %s |", lookup.ns, lookup.allocs, yesNo(lookup.ns <= 1000 && lookup.allocs <= 3))
	} else {
		p("| ≤ 1 µs and ≤ 3 allocs per lookup | not measured: no Go benchmark output in %s | |", goBenchFile)
	}
	for _, row := range perQueryRows(gb) {
		p("%s", row)
	}
	if syncOne != nil {
		p("| 1-endpoint change in a 10-cluster × 1,000-pod group (BenchmarkSyncOneEndpoint) | %.2f ms, %.0f allocs | proportional to the changed cluster's member |", syncOne.ns/1e6, syncOne.allocs)
	}
	if len(r.mem) > 0 {
		// Every point counts: the target holds at each size.
		var cells []string
		met := true
		for _, m := range r.mem {
			per := float64(m.inuse-r.memBase.inuse) / float64(m.eps)
			met = met && per <= 300
			cell := fmt.Sprintf("%d endpoints: %.0f B", m.eps, per)
			if m.k != nil && r.memBase.k != nil {
				cell += fmt.Sprintf(" (kubernetes plugin on the same records %.0f B)", float64(m.k.inuse-r.memBase.k.inuse)/float64(m.eps))
			}
			cells = append(cells, cell)
		}
		p("| ≤ 0.3 KB heap per mirrored endpoint (10 clusters) | %s; HeapInuse after GC, median of %d processes a point | %s |", strings.Join(cells, "; "), r.memBase.repeats, yesNo(met))
	} else {
		p("| ≤ 0.3 KB heap per mirrored endpoint | not measured: %s | |", r.memErr)
	}
	if r.prop != nil && len(r.prop.d) > 0 {
		p("| propagation p99 ≤ 0.5 s (endpoint change) | p99 %s over %d changes | %s |", r.prop.pct(0.99).Round(time.Millisecond), len(r.prop.d), yesNo(r.prop.pct(0.99) <= 500*time.Millisecond && r.prop.failed == 0))
	} else {
		p("| propagation p99 ≤ 0.5 s (endpoint change) | not measured: %s | |", r.propErr)
	}
	if r.export != nil && len(r.export.d) > 0 {
		p("| propagation p99 ≤ 2 s (new export) | p99 %s over %d exports | %s |", r.export.pct(0.99).Round(time.Millisecond), len(r.export.d), yesNo(r.export.pct(0.99) <= 2*time.Second && r.export.failed == 0))
	} else {
		p("| propagation p99 ≤ 2 s (new export) | %s | |", orNA(r.exportErr))
	}
	if c := r.cold; c != nil {
		after := c.index - c.lists
		p("| cold start ≤ 5 s after the API lists return (10 links × %d exported Services) | index complete %.2f s after the process started, lists %.2f s: %.2f s after them (every one of %d names verified correct by %.2f s; %d objects listed; HeapInuse then %.1f MiB) | %s |",
			c.svcs/10, c.index.Seconds(), c.lists.Seconds(), after.Seconds(), c.names, c.correct.Seconds(), c.objects, float64(c.inuse)/(1<<20), yesNo(after <= 5*time.Second))
	} else {
		p("| cold start ≤ 5 s after the API lists return | not measured: %s | |", orNA(r.coldErr))
	}
	switch c := r.cold; {
	case c == nil || !cfg.relist:
	case c.relist == nil:
		p("| memory during a relist of every link ≤ 1.3× steady | not measured: %s | |", orNA(c.relistErr))
	default:
		x := c.relist
		p("| memory during a relist of every link ≤ 1.3× steady (the cold-start set, 10 API servers restarted) | HeapInuse peak %.1f MiB (at %.1f s, %d samples every 100 ms) ÷ steady %.1f MiB (after a forced GC) = %.3f×; ÷ the idle samples' peak %.1f MiB = %.3f×; after the relist %.1f MiB; VmRSS peak %.1f MiB ÷ %.1f MiB before = %.3f×; the server read %.1f MiB in the relist, %.1f MiB in its cold start; every name back: %s | %s |",
			mib(x.peak), x.peakAt.Seconds(), x.samples, mib(x.steady), x.ratio(), mib(x.idlePeak), float64(x.peak)/float64(x.idlePeak),
			mib(x.after), mib(x.peakRSS), mib(x.rss), float64(x.peakRSS)/float64(x.rss), mib(x.read), mib(x.coldRead), yesNo(x.namesBack), relistVerdict(x))
	}
	p("")

	p("### Memory\n")
	p("Plugin mcmirror alone (A server, GOMAXPROCS=1), 10 linked clusters; Services of 100 named endpoints (one slice each). Every point is the median of %d fresh processes, each read through the pprof plugin after a forced GC (`/debug/pprof/heap?gc=1`). Per endpoint is the difference to the point with no endpoints, divided by the endpoints: the plugin's stores of Services and slices and its index.\n", max(r.memBase.repeats, 1))
	if r.memErr != "" {
		p("- not measured in full: %s", r.memErr)
	}
	// memTable is a table of the points, of the A server or (k) of the
	// kubernetes plugin's.
	memTable := func(k bool) {
		p("| mirrored endpoints | HeapInuse | HeapAlloc | RSS | heap per endpoint (inuse / alloc) | RSS per endpoint | start to all names correct |")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
		point := func(m memPoint) (*memPoint, string) {
			if k {
				return m.k, m.kErr
			}
			return &m, ""
		}
		b, bErr := point(r.memBase)
		if b != nil && b.inuse > 0 {
			p("| 0 | %.1f MiB | %.1f MiB | %.1f MiB | | | %.1f s |", mib(b.inuse), mib(b.alloc), mib(b.rss), b.startup.Seconds())
		} else if bErr != "" {
			p("| 0 | not measured: %s | | | | | |", bErr)
		}
		for _, m := range r.mem {
			x, xErr := point(m)
			if x == nil || b == nil {
				p("| %d | not measured: %s | | | | | |", m.eps, xErr)
				continue
			}
			n := float64(m.eps)
			p("| %d | %.1f MiB | %.1f MiB | %.1f MiB | %.0f B / %.0f B | %.0f B | %.1f s |", m.eps, mib(x.inuse), mib(x.alloc), mib(x.rss),
				float64(x.inuse-b.inuse)/n, float64(x.alloc-b.alloc)/n, float64(x.rss-b.rss)/n, x.startup.Seconds())
		}
		p("")
	}
	memTable(false)
	p("The kubernetes plugin on the same records (one plugin per linked cluster, zones c0.local..c9.local, in one process), measured right after each point above:\n")
	memTable(true)

	p("### Propagation latency\n")
	p("From the API request that changes (or creates) a remote object to the first correct answer of a server polled every millisecond over UDP.\n")
	p("| what | samples | failed | p50 | p90 | p99 | max | API write (median) |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	row := func(what string, l *latencies, errs string) {
		if l == nil || len(l.d) == 0 {
			p("| %s | | | %s | | | | |", what, orNA(errs))
			return
		}
		p("| %s | %d | %d | %s | %s | %s | %s | %s |", what, len(l.d), l.failed, ms(l.pct(0.5)), ms(l.pct(0.9)), ms(l.pct(0.99)), ms(l.pct(1)), ms(apiMedian(l)))
	}
	row("remote EndpointSlice change → new address answered (A10 server, 10 links, largest set)", r.prop, r.propErr)
	row("new gateway-mode export → its mirror ClusterIP answered (controller + plugin)", r.export, r.exportErr)
	if r.exportErr != "" && r.export != nil && len(r.export.d) > 0 {
		p("")
		p("- new exports: %s", r.exportErr)
	}
	if r.export != nil {
		p("- the controller (`coredns-mc controller -v 2`) logged %d retried syncs (\"Sync failed, retrying\") during the %d new exports; see bench/out/logs/controller.log", r.exportRetries, r.cfg.exportN)
	}
	p("- the gateway data path (throughput, added latency) is measured by gwbench: see gateway.md\n")

	p("### Per-query cost (Go benchmarks of the plugin, `go test -bench . -benchmem ./plugin/...`)\n")
	if len(gb) == 0 {
		p("not measured: no Go benchmark output in %s", goBenchFile)
	} else {
		p("| benchmark | ns/op | B/op | allocs/op | its own metrics |")
		p("| --- | ---: | ---: | ---: | --- |")
		for _, g := range gb {
			p("| %s | %.0f | %.0f | %.0f | %s |", g.name, g.ns, g.bytes, g.allocs, g.other)
		}
	}
	p("")
	if r.heapProfile != "" {
		p("### Where the heap goes (in-use heap profile of the largest memory point, `go tool pprof -top -sample_index=inuse_space`)\n")
		fence(r.heapProfile)
	}
	if c := r.cold; c != nil && c.profile != "" {
		p("### Where the cold start's time goes (CPU profile from %.2f s after the process start, %s, GOMAXPROCS=1, `go tool pprof -top`)\n", c.profAt.Seconds(), cfg.coldProfile)
		fence(c.profile)
	}
	if c := r.cold; c != nil && c.relist != nil {
		p("Relist: the restarted API servers' counts of lists since their restart:\n")
		for _, l := range c.relist.lists {
			p("- %s", l)
		}
		p("")
		p("Every 100 ms sample of the relist is in `bench/out/relist.tsv`. What the server holds after it (in-use heap profile after a forced GC, `go tool pprof -top -sample_index=inuse_space`):\n")
		fence(c.relist.heapProfile)
	}
	for _, prof := range r.profiles {
		p("### Where %s's time goes (CPU profile, 5 s under dnsperf, `go tool pprof -top`, %s)\n", prof.key, filepath.Base(prof.path))
		fence(prof.top)
	}
	if rows := profileShares(cfg.cmc, r.profiles); len(rows) > 0 {
		p("### A10 against A1 in those profiles (share of each profile's samples, cumulative)\n")
		p("| function | %s |", strings.Join(profileKeys(r.profiles), " | "))
		p("| --- |%s", strings.Repeat(" ---: |", len(r.profiles)))
		for _, row := range rows {
			p("%s", row)
		}
		p("")
	}
	if len(r.forms) > 0 {
		p("### The per-query forms that miss the target, each profiled alone (BenchmarkServeDNS, `perquery.<form>.cpu.pprof`)\n")
		p("Each part is its cumulative share of ServeDNS's samples, and the time per query that share is.\n")
		head := "| form | per query |"
		for _, part := range formParts {
			head += " " + part.what + " |"
		}
		p("%s", head)
		p("| --- | ---: |%s", strings.Repeat(" ---: |", len(formParts)))
		for _, row := range formProfileRows(r.forms) {
			p("%s", row)
		}
		p("")
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// relistVerdict is met or missed, or "no relist seen" when the server
// did not read again what its cold start read.
func relistVerdict(x *relistResult) string {
	if !x.relisted() {
		return "**no relist seen**"
	}
	return yesNo(x.ratio() <= 1.3)
}

func orNA(s string) string {
	if s == "" {
		return "not measured"
	}
	return s
}

// goBenchFile is where bench/run.sh leaves the Go benchmarks' output.
var goBenchFile = "bench/out/gobench.txt"

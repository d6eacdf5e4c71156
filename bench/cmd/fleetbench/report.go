package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// report is the whole run, written to fleet.md.
type report struct {
	cfg      *config
	machine  string
	load     string // load average at the start
	started  time.Time
	finished time.Time
	startup  time.Duration // the clusters
	loaded   time.Duration // the exported Services
	empty    []emptyResult
	modes    []*modeResult
}

// row is one figure of the table: a value per mode, NaN when the mode has
// none.
type row struct {
	label  string
	format string // of one value, e.g. "%.1f"
	value  func(r *modeResult) float64
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return stats.Median(v)
}

func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

// api is f of each of a: of each API server's counters, mostly.
func api[T any](a []T, f func(T) float64) []float64 {
	out := make([]float64, len(a))
	for i, x := range a {
		out[i] = f(x)
	}
	return out
}

func ints(v []int64) []float64 { return api(v, func(x int64) float64 { return float64(x) }) }

// listed is d in seconds when the cold start's lists were timed alone,
// else NaN.
func listed(c coldResult, d time.Duration) float64 {
	if c.lists == 0 {
		return math.NaN()
	}
	return d.Seconds()
}

// recovered is d in seconds when the restart rec timed came to its end,
// else NaN: a restart that failed (its failure is listed under the table)
// has no such time.
func recovered(rec recovery, d time.Duration) float64 {
	if rec.err != "" {
		return math.NaN()
	}
	return d.Seconds()
}

// ran returns rows, their values NaN (shown as –) when the flags left
// their step out (on is false).
func ran(on bool, rows []row) []row {
	if !on {
		for i := range rows {
			rows[i].value = func(*modeResult) float64 { return math.NaN() }
		}
	}
	return rows
}

func (rep *report) emptyHeap(m mode) float64 {
	for _, e := range rep.empty {
		if e.m == m && e.err == "" {
			return float64(e.heap)
		}
	}
	return math.NaN()
}

func (rep *report) rows() []row {
	cfg := rep.cfg
	held := float64(endpointsHeld(cfg))
	perSec := func(r *modeResult) float64 { return r.window.Seconds() }
	changes := func(r *modeResult) float64 { return float64(len(r.prop)) }
	rows := []row{
		{"every replica holds every name, from the start of the processes (s)", "%.1f", func(r *modeResult) float64 { return r.settle.Seconds() }},
		{"**Per API server** (median of the N; its own cluster's clients included)", "", nil},
		{"watch connections, Services and EndpointSlices", "%.0f", func(r *modeResult) float64 {
			return median(api(r.steady, func(a apiCounters) float64 { return a.watches }))
		}},
		{"the same ÷ (N−1) linked clusters", "%.1f", func(r *modeResult) float64 {
			return median(api(r.steady, func(a apiCounters) float64 { return a.watches })) / float64(cfg.clusters-1)
		}},
		{"LIST requests and watch-list streams, start to settled", "%.0f", func(r *modeResult) float64 {
			return median(api(r.startup, func(a apiCounters) float64 { return a.lists }))
		}},
		{"LIST bytes sent, start to settled (MiB)", "%.2f", func(r *modeResult) float64 {
			return median(api(r.startup, func(a apiCounters) float64 { return a.listBytes })) / (1 << 20)
		}},
		{"watch event bytes sent, start to settled (MiB)", "%.2f", func(r *modeResult) float64 {
			return median(api(r.startup, func(a apiCounters) float64 { return a.watchBytes })) / (1 << 20)
		}},
		{"CPU, start to settled (s)", "%.1f", func(r *modeResult) float64 {
			return median(api(r.startup, func(a apiCounters) float64 { return a.cpu }))
		}},
		{"CPU under unexported churn (% of a core)", "%.1f", func(r *modeResult) float64 {
			return 100 * median(api(r.steady, func(a apiCounters) float64 { return a.cpu })) / perSec(r)
		}},
		{"watch event bytes sent under churn (KiB/s)", "%.1f", func(r *modeResult) float64 {
			return median(api(r.steady, func(a apiCounters) float64 { return a.watchBytes })) / 1024 / perSec(r)
		}},
		{"writes of Services and EndpointSlices per endpoint change, whole fleet", "%.1f", func(r *modeResult) float64 {
			return sum(api(r.propAPI, func(a apiCounters) float64 { return a.writes })) / changes(r)
		}},
		{"bytes of those writes per endpoint change, whole fleet (KiB)", "%.1f", func(r *modeResult) float64 {
			return sum(api(r.propAPI, func(a apiCounters) float64 { return a.writeBytes })) / 1024 / changes(r)
		}},
		{"writes of Services and EndpointSlices per second during the changes, whole fleet", "%.1f", func(r *modeResult) float64 {
			return sum(api(r.propAPI, func(a apiCounters) float64 { return a.writes })) / r.propFor.Seconds()
		}},
		{"etcd in use once settled, whole fleet (MiB)", "%.1f", func(r *modeResult) float64 { return r.etcd[1] / (1 << 20) }},
		{"**Per DNS replica** (median; max in the next row)", "", nil},
		{"RSS (MiB)", "%.1f", func(r *modeResult) float64 { return median(ints(r.dnsRSS)) / (1 << 20) }},
		{"RSS, largest (MiB)", "%.1f", func(r *modeResult) float64 { return maxOf(ints(r.dnsRSS)) / (1 << 20) }},
		{"HeapInuse after a forced GC (MiB)", "%.1f", func(r *modeResult) float64 { return median(ints(r.dnsHeap)) / (1 << 20) }},
		{fmt.Sprintf("heap per endpoint held ((HeapInuse − empty replica's) ÷ %.0f) (B)", held), "%.0f", func(r *modeResult) float64 {
			return (median(ints(r.dnsHeap)) - rep.emptyHeap(r.m)) / held
		}},
		{"CPU under unexported churn (% of a core)", "%.2f", func(r *modeResult) float64 { return 100 * median(r.dnsCPU) / perSec(r) }},
		{"objects received from the unexported churn, every replica together", "%.0f", func(r *modeResult) float64 { return r.events[0] }},
		{"**Per controller**", "", nil},
		{"RSS (MiB)", "%.1f", func(r *modeResult) float64 { return median(ints(r.ctlRSS)) / (1 << 20) }},
		{"CPU under unexported churn (% of a core)", "%.2f", func(r *modeResult) float64 { return 100 * median(r.ctlCPU) / perSec(r) }},
		{"objects received from the unexported churn, every controller together", "%.0f", func(r *modeResult) float64 { return r.events[1] }},
		{"controllers that exited (their Lease not renewed in time) and were started again", "%.0f", func(r *modeResult) float64 { return float64(r.restarts) }},
		{"**Propagation** of an endpoint change to every replica of every other cluster", "", nil},
		{"p50 (ms)", "%.0f", func(r *modeResult) float64 { return ms(percentile(r.prop, 0.5), len(r.prop)) }},
		{"p99 (ms)", "%.0f", func(r *modeResult) float64 { return ms(percentile(r.prop, 0.99), len(r.prop)) }},
		{"max (ms)", "%.0f", func(r *modeResult) float64 { return ms(percentile(r.prop, 1), len(r.prop)) }},
		{"**Cold start** of one more replica in " + clusterName(0, cfg.clusters), "", nil},
		{"its links", "%.0f", func(r *modeResult) float64 { return float64(r.cold.links) }},
		{"serving (ready, and an answer) (s)", "%.2f", func(r *modeResult) float64 { return r.cold.ready.Seconds() }},
		{"every name held (s)", "%.2f", func(r *modeResult) float64 { return r.cold.names.Seconds() }},
		{"the same lists alone, with client-go (s; with -cold-links)", "%.2f", func(r *modeResult) float64 { return listed(r.cold, r.cold.lists) }},
		{"every name held, after the lists (s; with -cold-links)", "%.2f", func(r *modeResult) float64 { return listed(r.cold, r.cold.names-r.cold.lists) }},
		{"HeapInuse then (MiB)", "%.1f", func(r *modeResult) float64 { return float64(r.cold.heap) / (1 << 20) }},
		{"**One API server restarted** (" + clusterName(1%cfg.clusters, cfg.clusters) + ")", "", nil},
	}
	restart := func(on bool, rec func(*modeResult) recovery, serving, served, peak string) []row {
		return ran(on, []row{
			{serving, "%.1f", func(r *modeResult) float64 { return recovered(rec(r), rec(r).down) }},
			{"then every link of the fleet healthy (s)", "%.1f", func(r *modeResult) float64 { return recovered(rec(r), rec(r).healthy) }},
			{served, "%.0f", func(r *modeResult) float64 { return rec(r).lists }},
			{peak, "%.1f", func(r *modeResult) float64 { return rec(r).peakLists }},
			{"answers checked meanwhile", "%.0f", func(r *modeResult) float64 { return float64(rec(r).probe.asked) }},
			{"wrong answers", "%.0f", func(r *modeResult) float64 { return float64(rec(r).probe.wrong) }},
			{"unanswered", "%.0f", func(r *modeResult) float64 { return float64(rec(r).probe.unanswered) }},
		})
	}
	rows = append(rows, restart(cfg.restartOne, func(r *modeResult) recovery { return r.one }, "stopped and serving again (s)",
		"LISTs and watch-lists it served, stop to healthy", "peak LIST rate (/s, 2 s samples)")...)
	rows = append(rows, row{"**Every API server restarted at once**", "", nil})
	rows = append(rows, restart(cfg.restartN, func(r *modeResult) recovery { return r.all }, "stopped and every one serving again (s)",
		"LISTs and watch-lists they served, stop to healthy", "peak LIST rate, all together (/s, 2 s samples)")...)
	return append(rows, []row{
		{"**Sampled names** of every other cluster, in every replica", "", nil},
		{"checked once settled", "%.0f", func(r *modeResult) float64 { return float64(r.check.asked) }},
		{"wrong or unanswered", "%.0f", func(r *modeResult) float64 { return float64(r.check.wrong + r.check.unanswered) }},
		{"checked after the restarts", "%.0f", func(r *modeResult) float64 { return float64(r.after.asked) }},
		{"wrong or unanswered", "%.0f", func(r *modeResult) float64 { return float64(r.after.wrong + r.after.unanswered) }},
	}...)
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// ms is d in milliseconds, NaN without samples.
func ms(d time.Duration, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return float64(d) / float64(time.Millisecond)
}

func (rep *report) String() string {
	cfg := rep.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet benchmark\n\n")
	fmt.Fprintf(&b, "Run of %s UTC, %.0f minutes; %s; load average %s at the start.\n\n",
		rep.started.UTC().Format("2006-01-02 15:04"), rep.finished.Sub(rep.started).Minutes(), rep.machine, rep.load)
	fmt.Fprintf(&b, "`-clusters %d -replicas %d -services %d -endpoints %d -samples %d -changes %d -churn %d -window %s`: %d kube-apiservers on one etcd, full mesh (%d links), "+
		"in each cluster %d DNS replicas and one controller; %d exported Services of %d endpoints per cluster, %d endpoints held by each replica. "+
		"Clusters up in %.0f s, Services loaded in %.0f s.\n\n",
		cfg.clusters, cfg.replicas, cfg.services, cfg.endpoints, cfg.samples, cfg.changes, cfg.churnRate, cfg.window,
		cfg.clusters, cfg.clusters*(cfg.clusters-1), cfg.replicas, cfg.services, cfg.endpoints, endpointsHeld(cfg),
		rep.startup.Seconds(), rep.loaded.Seconds())
	fmt.Fprintf(&b, "| figure |")
	for _, r := range rep.modes {
		fmt.Fprintf(&b, " %s |", r.m)
	}
	if len(rep.modes) == 2 {
		fmt.Fprintf(&b, " %s ÷ %s |", imported, direct)
	}
	fmt.Fprintf(&b, "\n| --- |%s\n", strings.Repeat(" ---: |", len(rep.modes)+boolInt(len(rep.modes) == 2)))
	for _, row := range rep.rows() {
		fmt.Fprintf(&b, "| %s |", row.label)
		var vals []float64
		for _, r := range rep.modes {
			v := math.NaN()
			if row.value != nil {
				v = row.value(r)
			}
			vals = append(vals, v)
			fmt.Fprintf(&b, " %s |", cell(row.format, v))
		}
		if len(vals) == 2 {
			ratio := ""
			if row.value != nil && !math.IsNaN(vals[0]) && !math.IsNaN(vals[1]) && vals[0] != 0 {
				ratio = fmt.Sprintf("%.2f", vals[1]/vals[0])
			}
			fmt.Fprintf(&b, " %s |", ratio)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, e := range rep.empty {
		if e.err == "" {
			fmt.Fprintf(&b, "- Empty replica (%s, its own cluster's Services only): HeapInuse %.1f MiB, RSS %.1f MiB.\n", e.m, mib(e.heap), mib(e.rss))
		}
	}
	for _, r := range rep.modes {
		for _, e := range r.errs {
			fmt.Fprintf(&b, "- %s: **failed**: %s\n", r.m, e)
		}
		for _, w := range []string{r.check.firstWrong, r.after.firstWrong, r.one.probe.firstWrong, r.all.probe.firstWrong} {
			if w != "" {
				fmt.Fprintf(&b, "- %s: wrong answer: %s\n", r.m, w)
			}
		}
		fmt.Fprintf(&b, "- %s: %d unexported objects written by the churn in the %.0f s window; link errors counted through the restarts: %.0f (one), %.0f (all).\n",
			r.m, r.churn, r.window.Seconds(), r.one.errorsSeen, r.all.errorsSeen)
	}
	return b.String()
}

func cell(format string, v float64) string {
	if format == "" {
		return ""
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// report is everything gateway.md says.
type report struct {
	cfg                *config
	w                  *world
	res                *results
	start              time.Time
	elapsed            time.Duration
	loadStart, loadEnd string
	haproxyVersion     string
	source             string            // the commit the gateway was built from, when known
	hapInfo            map[string]string // `show info` of the HAProxy ingress after the measures
	hapEgressInfo      map[string]string
	hs                 *handshakeResult
	hsErr              string
	sys                map[string]*syscallCount // setup key -> strace counts of a round-trip run
	sysErr             string
	prof               *profiles
}

// target is one goal of the issue and how the runs fared against it.
type target struct {
	what    string
	key     string    // the measure to profile when it is not met ("memory" for memory)
	values  []float64 // per run: gateway ÷ HAProxy, or the gateway's own figure
	bound   float64
	atLeast bool   // met when value >= bound (else <=)
	unit    string // how values print
}

func (t target) met(v float64) bool {
	if t.atLeast {
		return v >= t.bound
	}
	return v <= t.bound
}

// verdict is met when every run met the target, missed when none did, and
// on the line otherwise: a spread that straddles the bound is noise, not a
// result.
func (t target) verdict() string {
	if len(t.values) == 0 {
		return "not measured"
	}
	k := 0
	for _, v := range t.values {
		if t.met(v) {
			k++
		}
	}
	switch k {
	case len(t.values):
		return "met"
	case 0:
		return "**missed**"
	}
	return fmt.Sprintf("on the line (%d of %d runs met it)", k, len(t.values))
}

func (r *report) targets() []target {
	res := r.res
	added := res.perRun("rr", func(gw, hap, dir sample) (float64, bool) {
		if !dir.ok || hap.res.P50-dir.res.P50 <= 0 {
			return 0, false
		}
		return (gw.res.P50 - dir.res.P50) / (hap.res.P50 - dir.res.P50), true
	})
	// Memory per idle connection, gateway pair ÷ HAProxy pair, per run:
	// the target issue 22 restated (issue 8's 16 KiB was below what
	// crypto/tls alone holds for a connection).
	return []target{
		{what: "bulk throughput ≥ HAProxy pair's, 1 stream", key: "bulk1", values: res.ratios("bulk1", sample.mbps), bound: 1, atLeast: true, unit: "×"},
		{what: "bulk throughput ≥ HAProxy pair's, 16 streams", key: "bulk16", values: res.ratios("bulk16", sample.mbps), bound: 1, atLeast: true, unit: "×"},
		{what: "added round trip p50 ≤ HAProxy pair's", key: "rr", values: added, bound: 1, unit: "×"},
		{what: "connection rate ≥ HAProxy pair's", key: "connrate", values: res.ratios("connrate", sample.connsPerSec), bound: 1, atLeast: true, unit: "×"},
		{what: "memory per idle connection ≤ HAProxy pair's (RSS of both proxies)", key: "memory", values: res.memRatios(), bound: 1, unit: "×"},
	}
}

// String renders gateway.md.
func (r *report) String() string {
	var b strings.Builder
	cfg, res := r.cfg, r.res
	fmt.Fprintf(&b, "### gwbench results, %s\n\n", r.start.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- machine: %s\n", proc.Machine())
	fmt.Fprintf(&b, "- load average (1, 5, 15 min) at the start: %s; at the end: %s (other work shared the machine)\n", r.loadStart, r.loadEnd)
	fmt.Fprintf(&b, "- command: `bin/gwbench %s`, %.0f s in all (clusters, runs, memory, profiles)\n", strings.Join(cfg.argv, " "), r.elapsed.Seconds())
	if r.source != "" {
		fmt.Fprintf(&b, "- gateway source: %s\n", r.source)
	}
	fmt.Fprintf(&b, "- pinning: both proxies of a pair on CPU %s (gateways `GOMAXPROCS=1`, HAProxy `nbthread 1`), the client and the target on CPU %s, for every setup; the API servers and etcd float (idle during the runs)\n", cfg.proxyCPU, cfg.clientCPU)
	fmt.Fprintf(&b, "- %s; TLS negotiated by the gateway's ingress: %s; by the HAProxy ingress: %s (asked by a Go client offering X25519MLKEM768 and X25519)\n", r.haproxyVersion, r.w.cipherGW, r.w.cipherHAP)
	fmt.Fprintf(&b, "- %d interleaved runs (direct, then the two pairs in alternating order); bulk %s of sending per run, connection rate and round trips %s each; every run is preceded and followed by a check of every port (1 MiB counted by the sink, echoes, a once exchange) and counts only if the client saw no error\n\n",
		cfg.runs, cfg.bulkDur, cfg.shortDur)

	b.WriteString("| measure | direct | gateway pair | HAProxy pair | gateway ÷ HAProxy, per run |\n| --- | ---: | ---: | ---: | ---: |\n")
	row := func(title, m string, f func(sample) float64, format string, withDirect bool) {
		cells := []string{title}
		for _, k := range setupKeys {
			if k == "direct" && !withDirect {
				cells = append(cells, "–")
				continue
			}
			cells = append(cells, statCell(stats.Of(res.values(m, k, f)), format, res.runs))
		}
		cells = append(cells, ratioCell(stats.Of(res.ratios(m, f))))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	row("bulk throughput, 1 stream (MB/s)", "bulk1", sample.mbps, "%.0f", true)
	row(fmt.Sprintf("bulk throughput, %d streams (MB/s)", cfg.streams), "bulk16", sample.mbps, "%.0f", true)
	row(fmt.Sprintf("connections per second (%d concurrent)", cfg.conc), "connrate", sample.connsPerSec, "%.0f", true)
	row("round trip p50 (µs)", "rr", func(s sample) float64 { return s.res.P50 }, "%.1f", true)
	row("round trip p99 (µs)", "rr", func(s sample) float64 { return s.res.P99 }, "%.1f", true)
	for _, q := range []struct {
		name string
		f    func(clientResult) float64
	}{{"p50", func(c clientResult) float64 { return c.P50 }}, {"p99", func(c clientResult) float64 { return c.P99 }}} {
		added := func(k string) []float64 {
			var out []float64
			for i := range res.runs {
				s, d := res.data["rr"][k][i], res.data["rr"]["direct"][i]
				if s.ok && d.ok {
					out = append(out, q.f(s.res)-q.f(d.res))
				}
			}
			return out
		}
		ratios := res.perRun("rr", func(gw, hap, dir sample) (float64, bool) {
			den := q.f(hap.res) - q.f(dir.res)
			return (q.f(gw.res) - q.f(dir.res)) / den, dir.ok && den > 0
		})
		fmt.Fprintf(&b, "| added round trip %s, vs direct in the same run (µs) | – | %s | %s | %s |\n", q.name,
			statCell(stats.Of(added("gateway")), "%.1f", res.runs), statCell(stats.Of(added("haproxy")), "%.1f", res.runs), ratioCell(stats.Of(ratios)))
	}
	memCell := func(k string) []float64 {
		var out []float64
		for _, m := range res.mem[k] {
			if m.ok {
				out = append(out, m.perConn()/1024)
			}
		}
		return out
	}
	fmt.Fprintf(&b, "| memory per idle connection, RSS of both proxies (KiB) | – | %s | %s | %s |\n",
		statCell(stats.Of(memCell("gateway")), "%.1f", res.runs), statCell(stats.Of(memCell("haproxy")), "%.1f", res.runs), ratioCell(stats.Of(res.memRatios())))
	row("proxy CPU per GB, 1 stream (CPU-s/GB, both proxies)", "bulk1", sample.cpuPerGB, "%.2f", false)
	row(fmt.Sprintf("proxy CPU per GB, %d streams (CPU-s/GB)", cfg.streams), "bulk16", sample.cpuPerGB, "%.2f", false)
	row("proxy CPU per connection (µs, both proxies)", "connrate", sample.cpuPerConn, "%.0f", false)
	coreUse := func(s sample) float64 { return 100 * s.cpu / s.res.Seconds }
	row("proxies' use of their CPU during the 1-stream bulk (%)", "bulk1", coreUse, "%.0f", false)
	row(fmt.Sprintf("proxies' use of their CPU during the %d-stream bulk (%%)", cfg.streams), "bulk16", coreUse, "%.0f", false)
	b.WriteString("\nEach cell: median (min–max) over the valid runs, and how many were valid when not all. Ratios are computed within each run, then summarized; for added latency the ratio is (gateway − direct) ÷ (HAProxy − direct).\n\n")

	b.WriteString("#### Targets (issues 8 and 22)\n\n| target | measured, per run: median (min–max) | |\n| --- | --- | --- |\n")
	for _, t := range r.targets() {
		st := stats.Of(t.values)
		m := "no valid run"
		if st.N > 0 {
			m = fmt.Sprintf("gateway ÷ HAProxy %.2f× (%.2f–%.2f)", st.Med, st.Min, st.Max)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.what, m, t.verdict())
	}
	b.WriteString("\nA target is met when every run met it, missed when none did, and on the line when the runs straddle it.\n\n")

	r.writeMethod(&b)
	r.writeEvidence(&b)
	r.writeInvalid(&b)
	r.writeSyscalls(&b)
	r.writeProfiles(&b)
	return b.String()
}

func (r *report) writeMethod(b *strings.Builder) {
	cfg := r.cfg
	b.WriteString("#### How each figure is made\n\n")
	fmt.Fprintf(b, "- **bulk**: the client sends 64 KiB writes for %s on 1 or %d connections to the target's sink, half-closes, and the sink answers the byte count it read (it discards the data; checked equal to what was sent); throughput is the bytes counted over the time from the first connect to the last count\n", cfg.bulkDur, cfg.streams)
	fmt.Fprintf(b, "- **connections per second**: %d workers for %s, each in a loop: connect, send %d bytes, read the %d-byte echo and the server's close, close; only complete, correct exchanges count\n", cfg.conc, cfg.shortDur, cfg.size, cfg.size)
	fmt.Fprintf(b, "- **round trip**: one established connection to the echo port, %d bytes sent and echoed back, one at a time, for %s after 200 not counted; every round trip is a sample\n", cfg.size, cfg.shortDur)
	fmt.Fprintf(b, "- **memory**: each run starts both proxies afresh, warms them (0.5 s of connections), reads `VmRSS` of both from `/proc/PID/status`, opens %d connections through them to the echo port (each with one %d-byte round trip, so every hop is established), waits 1 s, reads `VmRSS` again; per connection = increase ÷ %d; the client then checks that every connection still echoes\n", cfg.idle, cfg.size, cfg.idle)
	b.WriteString("- **proxy CPU**: utime + stime of both proxy processes from `/proc/PID/stat`, over the client's run; per GB is per 10^9 bytes counted by the sink\n\n")
}

func (r *report) writeEvidence(b *strings.Builder) {
	b.WriteString("#### TLS per connection\n\n")
	if r.hs != nil {
		fmt.Fprintf(b, "- the gateway's TLS configurations (`Certs.ServerConfig`, `Certs.ClientConfig`), client and server in one process on one CPU, %d handshakes each on new TCP connections (key exchange %s): full handshake %.0f µs CPU (%.0f µs wall), resumed with a session cache as the egress keeps per peer %.0f µs CPU (%.0f µs wall); %d of %d resumed\n",
			r.hs.N, r.hs.Kex, r.hs.FullCPU, r.hs.FullWall, r.hs.ResCPU, r.hs.ResWall, r.hs.Resumed, r.hs.N)
	} else if r.hsErr != "" {
		fmt.Fprintf(b, "- handshake measurement failed: %s\n", r.hsErr)
	}
	if r.hapInfo != nil {
		fmt.Fprintf(b, "- HAProxy ingress after the runs (`show info`): %s TLS connections in all, peak %s per second, of which peak %s per second full handshakes (`SslFrontendMaxKeyRate`, sessions not resumed)\n",
			r.hapInfo["CumSslConns"], r.hapInfo["MaxSslRate"], r.hapInfo["SslFrontendMaxKeyRate"])
	}
	if r.hapEgressInfo != nil {
		fmt.Fprintf(b, "- HAProxy egress: peak %s per second full handshakes as a client (`SslBackendMaxKeyRate`)\n", r.hapEgressInfo["SslBackendMaxKeyRate"])
	}
	b.WriteString("\n")
}

func (r *report) writeInvalid(b *strings.Builder) {
	var lines []string
	for _, m := range measures {
		for _, k := range setupKeys {
			for i, s := range r.res.data[m.key][k] {
				if !s.ok {
					lines = append(lines, fmt.Sprintf("- run %d, %s, %s: %s", i+1, m.key, k, s.why))
				}
			}
		}
	}
	for _, k := range setupKeys[1:] {
		for i, m := range r.res.mem[k] {
			if !m.ok {
				lines = append(lines, fmt.Sprintf("- run %d, memory, %s: %s", i+1, k, m.why))
			}
		}
	}
	if len(lines) > 0 {
		b.WriteString("#### Runs not counted\n\n" + strings.Join(lines, "\n") + "\n\n")
	}
}

func (r *report) writeSyscalls(b *strings.Builder) {
	if r.sys == nil && r.sysErr == "" {
		return
	}
	b.WriteString("#### System calls per round trip (`strace -f -c` on both proxies, one extra round-trip run each, not counted)\n\n")
	for _, k := range []string{"gateway", "haproxy"} {
		if c := r.sys[k]; c != nil {
			fmt.Fprintf(b, "- %s: %s, over %d round trips\n", map[string]string{"gateway": "gateway pair", "haproxy": "HAProxy pair"}[k], c, c.roundTrips)
		}
	}
	if r.sysErr != "" {
		fmt.Fprintf(b, "- not counted: %s\n", r.sysErr)
	}
	b.WriteString("\n")
}

func (r *report) writeProfiles(b *strings.Builder) {
	p := r.prof
	if p == nil {
		return
	}
	b.WriteString("#### Where the gateway's time goes (in-process pair, `gwbench inproc`, same load)\n\n")
	if p.err != "" {
		fmt.Fprintf(b, "profiling failed: %s\n\n", p.err)
		return
	}
	for _, m := range measures {
		if t, ok := p.cpu[m.key]; ok {
			fmt.Fprintf(b, "CPU profile, %s:\n\n```\n%s```\n\n", m.title, t)
		}
	}
	if p.memErr != "" {
		fmt.Fprintf(b, "memory profile failed: %s\n\n", p.memErr)
	} else if p.conns > 0 {
		per := func(a, c uint64) float64 { return (float64(a) - float64(c)) / float64(p.conns) / 1024 }
		mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
		fmt.Fprintf(b, "With %d idle connections through the in-process pair (every allocation recorded), after a forced GC: heap in use %.1f → %.1f MiB (+%.1f KiB per connection), heap allocated +%.1f KiB per connection, goroutine stacks %.1f → %.1f MiB (+%.1f KiB per connection), %d goroutines (%d before). In-use heap profile:\n\n```\n%s```\n\n",
			p.conns, mib(p.memBefore.HeapInuse), mib(p.memWith.HeapInuse), per(p.memWith.HeapInuse, p.memBefore.HeapInuse),
			per(p.memWith.HeapAlloc, p.memBefore.HeapAlloc),
			mib(p.memBefore.StackInuse), mib(p.memWith.StackInuse), per(p.memWith.StackInuse, p.memBefore.StackInuse),
			p.memWith.Goroutines, p.memBefore.Goroutines, p.heap)
	}
}

func statCell(st stats.Summary, format string, runs int) string {
	if st.N == 0 {
		return "no valid run"
	}
	s := fmt.Sprintf(format+" ("+format+"–"+format+")", st.Med, st.Min, st.Max)
	if st.N < runs {
		s += fmt.Sprintf(", %d/%d runs", st.N, runs)
	}
	return s
}

func ratioCell(st stats.Summary) string {
	if st.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", st.Med, st.Min, st.Max)
}

// source says which commit the working tree is at, and which files of the
// gateway's code differ from it, when run in a git checkout.
func source() string {
	head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := "commit " + strings.TrimSpace(string(head))
	dirty, _ := exec.Command("git", "status", "--porcelain", "--", "gateway", "cmd/coredns-mc", "internal").Output()
	if files := changedCode(string(dirty)); len(files) > 0 {
		s += " with uncommitted changes to " + strings.Join(files, ", ")
	}
	return s
}

// changedCode returns the files of `git status --porcelain` output that are
// code the gateway is built from: not tests, not documentation. Each line is
// two status columns, a space and the path; the first column is a space for
// a file changed but not staged.
func changedCode(porcelain string) []string {
	var files []string
	for _, l := range strings.Split(strings.TrimRight(porcelain, "\n"), "\n") {
		if len(l) <= 3 {
			continue
		}
		f := l[3:]
		if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, ".md") {
			continue
		}
		files = append(files, f)
	}
	return files
}

// notMet lists the measures whose target was not met, for profiling.
func (r *report) notMet() (keys []string, mem bool) {
	for _, t := range r.targets() {
		if t.verdict() == "met" {
			continue
		}
		if t.key == "memory" {
			mem = true
		} else if !slices.Contains(keys, t.key) {
			keys = append(keys, t.key)
		}
	}
	return keys, mem
}

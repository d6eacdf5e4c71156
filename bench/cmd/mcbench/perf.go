package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// writeQueries writes a dnsperf data file with every name of the server
// once, A queries, in an order shuffled with a fixed seed.
func writeQueries(path string, n names) error {
	list := n.sorted()
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	var b strings.Builder
	for _, name := range list {
		fmt.Fprintf(&b, "%s A\n", name)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeZone writes the zone file of C and D: the records of n under
// cluster.local, TTL 5 as every other server answers.
func writeZone(path string, n names) error {
	var b strings.Builder
	b.WriteString("$ORIGIN cluster.local.\n$TTL 5\n")
	b.WriteString("@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5\n")
	b.WriteString("@ IN NS ns.dns.cluster.local.\n")
	b.WriteString("ns.dns IN A 127.0.0.1\n")
	for _, name := range n.sorted() {
		for _, ip := range n[name] {
			fmt.Fprintf(&b, "%s IN A %s\n", name, ip)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// perfResult is one dnsperf run.
type perfResult struct {
	qps       float64
	sent      int64
	completed int64
	lost      int64
	rcodes    string  // the "Response codes" line
	latency   float64 // average, seconds
	wall      float64 // seconds dnsperf ran
	serverCPU float64 // CPU seconds the server used during the run
	clientCPU float64 // CPU seconds dnsperf used
	valid     bool
	why       string // why not valid
}

var (
	reSent      = regexp.MustCompile(`Queries sent:\s+(\d+)`)
	reCompleted = regexp.MustCompile(`Queries completed:\s+(\d+)`)
	reLost      = regexp.MustCompile(`Queries lost:\s+(\d+)`)
	reRcodes    = regexp.MustCompile(`Response codes:\s+(.*)`)
	reQPS       = regexp.MustCompile(`Queries per second:\s+([\d.]+)`)
	reLatency   = regexp.MustCompile(`Average Latency \(s\):\s+([\d.]+)`)
)

// dnsperf runs dnsperf pinned to the client core against s for dur.
func dnsperf(s *server, qfile string, dur time.Duration, cpu string, logDir string) perfResult {
	args := []string{"-c", cpu, "dnsperf", "-s", "127.0.0.1", "-p", strconv.Itoa(s.port), "-d", qfile,
		"-l", strconv.Itoa(int(dur.Seconds())), "-c", "4", "-q", "100", "-T", "1", "-t", "2"}
	cpu0 := proc.CPUSeconds(s.proc.PID())
	t0 := time.Now()
	cmd := exec.Command("taskset", args...)
	out, err := cmd.CombinedOutput()
	wall := time.Since(t0).Seconds()
	serverCPU := proc.CPUSeconds(s.proc.PID()) - cpu0
	proc.AppendLog(filepath.Join(logDir, "dnsperf.log"), fmt.Sprintf("### %s %s\n%s", s.key, time.Now().Format(time.RFC3339), out))
	r := perfResult{wall: wall, serverCPU: serverCPU}
	if cmd.ProcessState != nil {
		r.clientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		r.why = fmt.Sprintf("dnsperf: %v", err)
		return r
	}
	num := func(re *regexp.Regexp) string {
		m := re.FindSubmatch(out)
		if m == nil {
			return ""
		}
		return string(m[1])
	}
	r.sent, _ = strconv.ParseInt(num(reSent), 10, 64)
	r.completed, _ = strconv.ParseInt(num(reCompleted), 10, 64)
	r.lost, _ = strconv.ParseInt(num(reLost), 10, 64)
	r.qps, _ = strconv.ParseFloat(num(reQPS), 64)
	r.latency, _ = strconv.ParseFloat(num(reLatency), 64)
	r.rcodes = strings.TrimSpace(num(reRcodes))
	switch {
	case r.completed == 0:
		r.why = "no answers"
	case !strings.HasPrefix(r.rcodes, "NOERROR") || strings.Contains(r.rcodes, ","):
		r.why = "rcodes other than NOERROR: " + r.rcodes
	case float64(r.lost) > 0.001*float64(r.sent):
		r.why = fmt.Sprintf("%d of %d queries lost", r.lost, r.sent)
	default:
		r.valid = true
	}
	return r
}

// series is the runs of one server at one size.
type series struct {
	server *server
	runs   []perfResult
}

func (s *series) valid() []perfResult {
	var out []perfResult
	for _, r := range s.runs {
		if r.valid {
			out = append(out, r)
		}
	}
	return out
}

// values returns f of the valid runs for which ok holds.
func (s *series) values(f func(r perfResult) float64, ok func(r perfResult) bool) []float64 {
	var v []float64
	for _, r := range s.valid() {
		if ok == nil || ok(r) {
			v = append(v, f(r))
		}
	}
	return v
}

func (s *series) medianQPS() float64 {
	return stats.Median(s.values(func(r perfResult) float64 { return r.qps }, nil))
}

func (s *series) medianLatency() float64 {
	return stats.Median(s.values(func(r perfResult) float64 { return r.latency }, nil))
}

// medianPerCPU is the median of answered queries per CPU second of the
// server: the throughput corrected for the CPU the scheduler gave it.
func (s *series) medianPerCPU() float64 {
	return stats.Median(s.values(func(r perfResult) float64 { return float64(r.completed) / r.serverCPU },
		func(r perfResult) bool { return r.serverCPU > 0 }))
}

// medianUtil returns the median share of a core the server and dnsperf
// used during the runs.
func (s *series) medianUtil() (server, client float64) {
	ran := func(r perfResult) bool { return r.wall > 0 }
	return stats.Median(s.values(func(r perfResult) float64 { return r.serverCPU / r.wall }, ran)),
		stats.Median(s.values(func(r perfResult) float64 { return r.clientCPU / r.wall }, ran))
}

func (s *series) minMax() (float64, float64) {
	st := stats.Of(s.values(func(r perfResult) float64 { return r.qps }, nil))
	return st.Min, st.Max
}

// interleave runs dnsperf against each server in turn, runs times, after a
// verification of a sample of its names before every run.
func interleave(servers []*server, qfiles map[string]string, runs int, dur time.Duration, logDir string) []*series {
	out := make([]*series, len(servers))
	for i, s := range servers {
		out[i] = &series{server: s}
		// Warm-up, not counted: caches, page faults, the GC's pacing.
		dnsperf(s, qfiles[s.key], time.Second, clientCPU, logDir)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for r := range runs {
		for i, s := range servers {
			list := s.expect.sorted()
			sample := make([]string, 0, 200)
			for range 200 {
				sample = append(sample, list[rng.IntN(len(list))])
			}
			if err := s.verify(sample, 4); err != nil {
				out[i].runs = append(out[i].runs, perfResult{why: "wrong answer before the run: " + err.Error()})
				continue
			}
			res := dnsperf(s, qfiles[s.key], dur, clientCPU, logDir)
			// ...and after: a server that broke under load does not count.
			if res.valid {
				if err := s.verify(sample[:50], 2); err != nil {
					res.valid, res.why = false, "wrong answer after the run: "+err.Error()
				}
			}
			out[i].runs = append(out[i].runs, res)
			status := "ok"
			if !res.valid {
				status = "INVALID: " + res.why
			}
			logf("  run %d/%d %-4s %9.0f qps  avg %.3f ms  server CPU %3.0f%%  dnsperf CPU %3.0f%%  %s", r+1, runs, s.key, res.qps, res.latency*1e3,
				100*res.serverCPU/res.wall, 100*res.clientCPU/res.wall, status)
		}
	}
	return out
}

package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// measure is one load the client puts on a setup.
type measure struct {
	key, title string
	port       int32                      // the target port it uses
	args       func(cfg *config) []string // but -duration and -addr
	dur        func(cfg *config) time.Duration
}

// load is the client's arguments for m on s, for dur.
func (m measure) load(cfg *config, s *setup, dur time.Duration) []string {
	return append(m.args(cfg), "-duration", dur.String(), "-addr", s.addr(m.port))
}

var measures = []measure{
	{key: "bulk1", title: "bulk throughput, 1 stream", port: sinkPort,
		args: func(cfg *config) []string { return []string{"-mode", "bulk", "-streams", "1"} },
		dur:  func(cfg *config) time.Duration { return cfg.bulkDur }},
	{key: "bulk16", title: "bulk throughput, 16 streams", port: sinkPort,
		args: func(cfg *config) []string { return []string{"-mode", "bulk", "-streams", strconv.Itoa(cfg.streams)} },
		dur:  func(cfg *config) time.Duration { return cfg.bulkDur }},
	{key: "connrate", title: "connection set-up rate", port: oncePort,
		args: func(cfg *config) []string {
			return []string{"-mode", "connrate", "-streams", strconv.Itoa(cfg.conc), "-size", strconv.Itoa(cfg.size)}
		},
		dur: func(cfg *config) time.Duration { return cfg.shortDur }},
	{key: "rr", title: "round trip on an established connection", port: echoPort,
		args: func(cfg *config) []string { return []string{"-mode", "rr", "-size", strconv.Itoa(cfg.size)} },
		dur:  func(cfg *config) time.Duration { return cfg.shortDur }},
}

// sample is one client run on one setup.
type sample struct {
	ok  bool
	why string // why not ok
	res clientResult
	cpu float64 // CPU seconds the proxies used during the run
}

// mbps is the bulk throughput in MB/s (10^6 bytes).
func (s sample) mbps() float64 {
	if s.res.Seconds == 0 {
		return 0
	}
	return float64(s.res.Bytes) / 1e6 / s.res.Seconds
}

func (s sample) connsPerSec() float64 {
	if s.res.Seconds == 0 {
		return 0
	}
	return float64(s.res.Conns) / s.res.Seconds
}

// cpuPerGB is the proxies' CPU seconds per GB (10^9 bytes) carried.
func (s sample) cpuPerGB() float64 {
	if s.res.Bytes == 0 {
		return 0
	}
	return s.cpu / (float64(s.res.Bytes) / 1e9)
}

// cpuPerConn is the proxies' CPU microseconds per connection.
func (s sample) cpuPerConn() float64 {
	if s.res.Conns == 0 {
		return 0
	}
	return s.cpu / float64(s.res.Conns) * 1e6
}

// results holds every sample: measure key -> setup key -> one per run.
type results struct {
	runs int
	data map[string]map[string][]sample
	mem  map[string][]memSample
}

func newResults(runs int) *results {
	r := &results{runs: runs, data: map[string]map[string][]sample{}, mem: map[string][]memSample{}}
	for _, m := range measures {
		r.data[m.key] = map[string][]sample{}
		for _, k := range setupKeys {
			r.data[m.key][k] = make([]sample, runs)
		}
	}
	for _, k := range setupKeys[1:] {
		r.mem[k] = make([]memSample, runs)
	}
	return r
}

var setupKeys = []string{"direct", "gateway", "haproxy"}

// order is the setups of run r: direct first, then the two pairs, whose
// order alternates from run to run so that neither always follows the other.
func order(setups []*setup, r int) []*setup {
	out := slices.Clone(setups)
	if r%2 == 1 && len(out) == 3 {
		out[1], out[2] = out[2], out[1]
	}
	return out
}

// measureAll warms every setup up, then runs every measure on every setup,
// interleaved: run 1 of each measure on each setup, then run 2, ...
func measureAll(cfg *config, setups []*setup, res *results) {
	for _, s := range setups {
		logf("warm-up %s", s.name)
		for _, m := range measures {
			_, _ = runClient(cfg, time.Minute, m.load(cfg, s, time.Second)...)
		}
	}
	for r := range cfg.runs {
		for _, m := range measures {
			for _, s := range order(setups, r) {
				smp := runOne(cfg, s, m)
				res.data[m.key][s.key][r] = smp
				logf("  run %d/%d %-8s %-7s %s", r+1, cfg.runs, m.key, s.key, describe(m.key, smp))
			}
		}
	}
}

// runOne checks s, runs the client once, and checks s again.
func runOne(cfg *config, s *setup, m measure) sample {
	if err := check(s); err != nil {
		return sample{why: "not working before the run: " + err.Error()}
	}
	cpu0 := s.cpu()
	res, err := runClient(cfg, m.dur(cfg)+2*time.Minute, m.load(cfg, s, m.dur(cfg))...)
	smp := sample{res: res, cpu: s.cpu() - cpu0}
	switch {
	case err != nil:
		smp.why = err.Error()
	case res.Errors > 0:
		smp.why = fmt.Sprintf("%d errors, the first: %s", res.Errors, res.FirstErr)
	default:
		if err := check(s); err != nil {
			smp.why = "not working after the run: " + err.Error()
		} else {
			smp.ok = true
		}
	}
	return smp
}

func describe(key string, s sample) string {
	if !s.ok {
		return "INVALID: " + s.why
	}
	switch key {
	case "bulk1", "bulk16":
		return fmt.Sprintf("%7.0f MB/s  proxies %4.0f%% CPU, %.2f CPU-s/GB", s.mbps(), 100*s.cpu/s.res.Seconds, s.cpuPerGB())
	case "connrate":
		return fmt.Sprintf("%7.0f conn/s  proxies %4.0f%% CPU, %.0f µs/conn", s.connsPerSec(), 100*s.cpu/s.res.Seconds, s.cpuPerConn())
	case "rr":
		return fmt.Sprintf("p50 %6.1f µs  p99 %6.1f µs  (%d round trips)", s.res.P50, s.res.P99, s.res.N)
	}
	return ""
}

// values returns f of the valid samples of a measure and setup.
func (r *results) values(m, setup string, f func(sample) float64) []float64 {
	var out []float64
	for _, s := range r.data[m][setup] {
		if s.ok {
			out = append(out, f(s))
		}
	}
	return out
}

// ratios is f(gateway) ÷ f(haproxy) of measure m in every run where both
// pairs are valid and f(haproxy) is not 0.
func (r *results) ratios(m string, f func(sample) float64) []float64 {
	return r.perRun(m, func(gw, hap, _ sample) (float64, bool) { return f(gw) / f(hap), f(hap) != 0 })
}

// perRun returns f(gateway, haproxy, direct) for every run where both pairs
// are valid (and f says ok: a figure relative to direct needs direct's):
// ratios from the same run's numbers.
func (r *results) perRun(m string, f func(gw, hap, dir sample) (float64, bool)) []float64 {
	var out []float64
	for i := range r.runs {
		gw, hap, dir := r.data[m]["gateway"][i], r.data[m]["haproxy"][i], r.data[m]["direct"][i]
		if !gw.ok || !hap.ok {
			continue
		}
		if v, ok := f(gw, hap, dir); ok {
			out = append(out, v)
		}
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// profiles are what the in-process pair showed, by workload.
type profiles struct {
	cpu    map[string]string // measure key -> `pprof -top`
	heap   string            // with cfg.idle idle connections
	memErr string
	// mem is the Go runtime's view of the idle connections: heap and
	// goroutine stacks before and with them open.
	memBefore, memWith memStats
	conns              int64
	err                string
}

// profileGateway runs `gwbench inproc` pinned to the proxy CPU and, for
// each measure given, takes a CPU profile while the client runs that load
// through it; with mem, it runs another inproc that records every
// allocation, and takes a heap profile and the runtime's memory statistics
// with the idle connections open.
func profileGateway(cfg *config, w *world, keys []string, mem bool) *profiles {
	out := &profiles{cpu: map[string]string{}}
	if len(keys) > 0 {
		base, s, err := startInproc(cfg, w, 0)
		if err != nil {
			out.err = err.Error()
			return out
		}
		for _, m := range measures {
			if slices.Contains(keys, m.key) {
				out.cpu[m.key] = cpuProfile(cfg, base, s, m)
			}
		}
		s.stop()
	}
	if mem {
		base, s, err := startInproc(cfg, w, 1)
		if err != nil {
			out.memErr = err.Error()
			return out
		}
		defer s.stop()
		path := filepath.Join(cfg.out, "gw-inproc.idle.heap.pprof")
		if out.memBefore, err = getMemStats(base); err == nil {
			err = holdIdle(cfg, s.echo, func(r clientResult) error {
				out.conns = r.Conns
				var err error
				if out.memWith, err = getMemStats(base); err != nil {
					return err
				}
				return proc.Fetch(base+"/debug/pprof/heap?gc=1", path)
			})
		}
		if err != nil {
			out.memErr = err.Error()
			return out
		}
		out.heap = pprofTop(cfg, path, "inuse_space")
	}
	return out
}

// startInproc starts `gwbench inproc` (memRate 0: the default sampling)
// pinned to the proxy CPU and waits until it carries connections; s.stop
// ends it.
func startInproc(cfg *config, w *world, memRate int) (base string, s *setup, err error) {
	var egress []string
	for _, p := range targetPorts {
		egress = append(egress, fmt.Sprintf("%d=%d", p.port, w.egress[p.port]))
	}
	port, err := harness.FreeTCPPort()
	if err != nil {
		return "", nil, err
	}
	base = "http://127.0.0.1:" + strconv.Itoa(port)
	argv := []string{"taskset", "-c", cfg.proxyCPU, cfg.self, "inproc", "-certs", w.certDir, "-target", w.podIP.String(),
		"-egress", strings.Join(egress, ","), "-pprof", "127.0.0.1:" + strconv.Itoa(port)}
	if memRate > 0 {
		argv = append(argv, "-memprofilerate", strconv.Itoa(memRate))
	}
	p, err := proc.Start("inproc", filepath.Join(cfg.out, "logs", "gw-inproc.log"), []string{"GOMAXPROCS=1"}, argv...)
	if err != nil {
		return "", nil, err
	}
	s = &setup{key: "inproc", name: "in-process gateway pair", procs: []*proc.Proc{p}}
	if err := p.WaitHTTP(base+"/debug/pprof/", 30*time.Second); err != nil {
		s.stop()
		return "", nil, fmt.Errorf("inproc did not start: %v\n%s", err, proc.Tail(p.Log, 20))
	}
	at := func(port int32) string { return "127.0.0.1:" + strconv.Itoa(w.egress[port]) }
	s.sink, s.echo, s.once = at(sinkPort), at(echoPort), at(oncePort)
	if err := waitWorking(s, 30*time.Second); err != nil {
		s.stop()
		return "", nil, err
	}
	return base, s, nil
}

// cpuProfile warms the in-process pair with m's load, then profiles a run
// of the same load.
func cpuProfile(cfg *config, base string, s *setup, m measure) string {
	_, _ = runClient(cfg, time.Minute, m.load(cfg, s, m.dur(cfg))...)
	secs := int(m.dur(cfg).Round(time.Second) / time.Second)
	path := filepath.Join(cfg.out, "gw-inproc."+m.key+".cpu.pprof")
	done := make(chan error, 1)
	go func() { done <- proc.Fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, max(1, secs)), path) }()
	time.Sleep(100 * time.Millisecond)
	res, err := runClient(cfg, m.dur(cfg)+time.Minute, m.load(cfg, s, m.dur(cfg))...)
	perr := <-done
	switch {
	case perr != nil:
		return "profile failed: " + perr.Error()
	case err != nil:
		return "load failed: " + err.Error()
	}
	var got string
	smp := sample{ok: true, res: res}
	switch m.key {
	case "bulk1", "bulk16":
		got = fmt.Sprintf("%.0f MB/s", smp.mbps())
	case "connrate":
		got = fmt.Sprintf("%.0f connections/s", smp.connsPerSec())
	case "rr":
		got = fmt.Sprintf("round trip p50 %.1f µs, p99 %.1f µs", res.P50, res.P99)
	}
	return fmt.Sprintf("the in-process pair under the same load did %s\n\n%s", got, pprofTop(cfg, path, ""))
}

func getMemStats(base string) (memStats, error) {
	var ms memStats
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(base + "/memstats")
	if err != nil {
		return ms, err
	}
	defer resp.Body.Close()
	return ms, json.NewDecoder(resp.Body).Decode(&ms)
}

// pprofTop is `go tool pprof -top` of a profile, flat then cumulative.
func pprofTop(cfg *config, path, sampleIndex string) string {
	args := []string{"-nodecount=22"}
	if sampleIndex != "" {
		args = append(args, "-sample_index="+sampleIndex)
	}
	flat, err := proc.Top(cfg.self, path, args...)
	if err != nil {
		return err.Error()
	}
	cum, err := proc.Top(cfg.self, path, append(args, "-cum")...)
	if err != nil {
		return flat
	}
	return flat + "\n--- by cumulative (-cum):\n" + proc.Table(cum)
}

// measureHandshakes runs `gwbench handshake` pinned to the proxy CPU.
func measureHandshakes(cfg *config, w *world) (handshakeResult, error) {
	var r handshakeResult
	out, err := pinned(context.Background(), cfg, cfg.proxyCPU, "handshake", "-certs", w.certDir, "-n", "500").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return r, fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return r, err
	}
	return r, json.Unmarshal(out, &r)
}

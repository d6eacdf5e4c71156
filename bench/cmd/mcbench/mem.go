package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// memPoint is the heap of a fresh A server holding eps mirrored endpoints
// of the mem set, after a forced GC.
type memPoint struct {
	eps               int
	inuse, alloc, rss int64
	startup           time.Duration // process start to every name correct
	names             int           // names verified
	repeats           int           // fresh processes measured; the figures are their medians
	// k is the same measure of a kubernetes plugin server holding the
	// same records (one plugin per cluster, in one process); zero when
	// it failed, kErr says why.
	k    *memPoint
	kErr string
}

// kubernetesMemCorefile has one kubernetes plugin per linked cluster, each
// in its own server block and zone, in one process: the same records the
// A server with 10 links holds, held the kubernetes plugin's way.
func kubernetesMemCorefile(env *harness.Env) string {
	var b strings.Builder
	for i, r := range remotes(10) {
		fmt.Fprintf(&b, "%s.local.:{PORT} {\n    bind 127.0.0.1\n", r)
		if i == 0 {
			b.WriteString("    ready 127.0.0.1:{READY}\n    {PPROF}\n")
		}
		fmt.Fprintf(&b, "    kubernetes %s.local {\n        kubeconfig %s\n    }\n}\n", r, env.Cluster(r).Kubeconfig)
	}
	return b.String()
}

// expectMem returns a sample of the names of m0..m<svcs-1>: the first and
// the last endpoint of each Service in each cluster, named as the A server
// names them, or with kubernetes as the kubernetes plugin server does
// (cluster c's records under zone c<c>.local).
func expectMem(svcs int, kubernetes bool) names {
	out := names{}
	for c := range 10 {
		for i := range svcs {
			for _, j := range []int{0, 99} {
				name := fmt.Sprintf("e%d.m%d-c%d.%s.%s", j, i, c, nsMem, zone)
				if kubernetes {
					name = fmt.Sprintf("e%d.m%d.%s.svc.c%d.local.", j, i, nsMem, c)
				}
				out[name] = []string{ipMem(c, i, j)}
			}
		}
	}
	return out
}

// memory measures the heap of the A server with 10 links and the mem set
// empty, then after each step of loading it; every point is a fresh
// process. The difference to the empty point is what the endpoints cost:
// the plugin's stores of Services and slices, and its index.
func memory(env *harness.Env, cfg *config, rep *report) error {
	measure := func(svcs int, kubernetes bool) (memPoint, error) {
		exp := expectMem(svcs, kubernetes)
		o := serverOpts{key: fmt.Sprintf("mem%d", svcs*1000), what: "mem", bin: cfg.cmc, args: []string{"-conf", "{CONF}"},
			expect: exp, pprof: true, cpu: serverCPU,
			corefile: mcmirrorCorefile(env, remotes(10), "mirror.linkerd.io/exported=remote-discovery,mcbench=mem")}
		if kubernetes {
			o.key, o.corefile = "memK"+o.key[3:], kubernetesMemCorefile(env)
		}
		// A few fresh processes, the median of each figure: what a heap
		// holds in use after a GC varies by a few hundred KiB from one
		// process to the next (partly filled spans), which is 10–70 B per
		// endpoint at the smaller points.
		var ps []memPoint
		for i := range max(cfg.memRepeats, 1) {
			t := time.Now()
			s, err := startServer(cfg.out, o)
			if err != nil {
				return memPoint{}, err
			}
			p := memPoint{eps: svcs * 100 * 10, startup: time.Since(t), names: len(exp)}
			// Twice: the second GC sees what the first one's finalizers freed.
			for range 2 {
				if p.inuse, p.alloc, p.rss, err = s.heap(0); err != nil {
					s.proc.Stop()
					return p, err
				}
			}
			if i == 0 && svcs == cfg.memSteps[len(cfg.memSteps)-1] && !kubernetes {
				rep.heapProfile = heapProfile(s, cfg, "mem.heap.pprof")
			}
			s.proc.Stop()
			logf("memory: %s: %d endpoints: HeapInuse %.1f MiB, HeapAlloc %.1f MiB, RSS %.1f MiB", o.key, p.eps,
				mib(p.inuse), mib(p.alloc), mib(p.rss))
			ps = append(ps, p)
		}
		return medianPoint(ps), nil
	}
	// withK measures the A server, then the kubernetes plugin server on
	// the same records.
	withK := func(svcs int) (memPoint, error) {
		p, err := measure(svcs, false)
		if err != nil {
			return p, err
		}
		if k, err := measure(svcs, true); err != nil {
			p.kErr = err.Error()
		} else {
			p.k = &k
		}
		return p, nil
	}
	base, err := withK(0)
	if err != nil {
		return err
	}
	rep.memBase = base
	loaded := 0
	for _, step := range cfg.memSteps {
		t := time.Now()
		if err := loadMem(env, loaded, step); err != nil {
			return err
		}
		logf("memory: loaded m%d..m%d in 10 clusters in %.1fs", loaded, step-1, time.Since(t).Seconds())
		loaded = step
		p, err := withK(step)
		if err != nil {
			return err
		}
		rep.mem = append(rep.mem, p)
	}
	return nil
}

// heapProfile returns the top of the in-use heap profile of s, written to
// file in the output directory.
func heapProfile(s *server, cfg *config, file string) string {
	path := filepath.Join(cfg.out, file)
	if err := proc.Fetch(s.pprof+"/heap?gc=1", path); err != nil {
		return "heap profile failed: " + err.Error()
	}
	top, err := proc.Top(cfg.cmc, path, "-sample_index=inuse_space", "-nodecount=20")
	if err != nil {
		return err.Error()
	}
	return top
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// medianPoint returns the median of each figure of ps, measures of the
// same point (the lower middle of an even number).
func medianPoint(ps []memPoint) memPoint {
	med := func(f func(p memPoint) int64) int64 {
		v := make([]int64, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	m := ps[0]
	m.inuse = med(func(p memPoint) int64 { return p.inuse })
	m.alloc = med(func(p memPoint) int64 { return p.alloc })
	m.rss = med(func(p memPoint) int64 { return p.rss })
	m.startup = time.Duration(med(func(p memPoint) int64 { return int64(p.startup) }))
	m.repeats = len(ps)
	return m
}

// exportLatency runs the controller and an A server in gateway mode and
// measures how long a new export takes to resolve through its mirror.
func exportLatency(env *harness.Env, cfg *config, rep *report) {
	args := []string{cfg.cmc, "controller", "--cluster", "east", "--kubeconfig", env.Cluster("east").Kubeconfig,
		"--egress-address", "192.0.2.10", "--egress-ports", "40000-49999",
		"--export-selector", "mirror.linkerd.io/exported=true,mcbench=gw",
		"-metrics-addr", "", "-v", "2"} // -v 2 logs each retried sync, counted below
	for _, r := range remotes(10) {
		args = append(args, "--link", r+"="+env.Cluster(r).Kubeconfig)
	}
	ctrl, err := proc.Start("controller", filepath.Join(cfg.out, "logs", "controller.log"), nil, args...)
	if err != nil {
		rep.exportErr = "not measured: " + err.Error()
		return
	}
	defer ctrl.Stop()
	s, err := startServer(cfg.out, serverOpts{key: "Agw", what: "gw", bin: cfg.cmc, args: []string{"-conf", "{CONF}"},
		expect: names{}, cpu: serverCPU,
		corefile: mcmirrorCorefile(env, remotes(10), "mirror.linkerd.io/exported=true,mcbench=gw")})
	if err != nil {
		rep.exportErr = "not measured: " + firstLine(err.Error(), filepath.Join(cfg.out, "logs", "Agw.log"))
		return
	}
	defer s.proc.Stop()
	time.Sleep(2 * time.Second) // the controller's start-up sweep
	if ctrl.Exited() {
		rep.exportErr = fmt.Sprintf("not measured: the controller exited (%v): %s", ctrl.Err(), firstLine(proc.Tail(ctrl.Log, 40), ctrl.Log))
		return
	}
	logf("new exports: %d, through the controller", cfg.exportN)
	l, err := newExports(env, s, cfg.exportN)
	rep.export = l
	if b, rerr := os.ReadFile(ctrl.Log); rerr == nil {
		rep.exportRetries = strings.Count(string(b), "Sync failed, retrying")
	}
	if err != nil {
		rep.exportErr = fmt.Sprintf("%v (controller log: %s)", err, ctrl.Log)
	}
}

// firstLine returns the first line of a log tail that is not the launch
// line, and where the whole log is.
func firstLine(t, path string) string {
	for _, l := range strings.Split(t, "\n") {
		if l != "" && !strings.HasPrefix(l, "###") {
			return fmt.Sprintf("%q (log: %s)", l, path)
		}
	}
	return "log: " + path
}

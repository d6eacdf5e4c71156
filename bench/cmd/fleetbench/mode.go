package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

// modeResult is what one mode measured.
type modeResult struct {
	m    mode
	errs []string

	settle  time.Duration // processes started → every replica holds every name
	startup []apiCounters // per API server: from before the start to settled
	steady  []apiCounters // per API server: the steady window, under churn
	etcd    [2]float64    // etcd's size in use before the start and once settled
	dnsCPU  []float64     // per replica, CPU seconds in the window
	dnsRSS  []int64       // per replica, at the window's end
	dnsHeap []int64       // per replica, HeapInuse after a forced GC
	ctlCPU  []float64     // per controller, CPU seconds in the window
	ctlRSS  []int64       // per controller
	window  time.Duration // its length
	churn   int           // unexported objects written in the window, every cluster
	events  [2]float64    // objects received in the window: DNS replicas, controllers
	check   checkResult   // sampled names once settled
	prop    []time.Duration
	propAPI []apiCounters // per API server during the propagation
	propFor time.Duration
	cold    coldResult
	one     recovery
	all     recovery
	after   checkResult // sampled names after the restarts
	// restarts counts the controllers that exited and were started again.
	restarts int
}

func (r *modeResult) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	logf("%s: %s", r.m, msg)
	r.errs = append(r.errs, msg)
}

// failed reports whether the mode ran and went wrong: an error, or a wrong
// answer anywhere.
func (r *modeResult) failed() bool {
	return len(r.errs) > 0 || r.check.wrong > 0 || r.after.wrong > 0 || r.one.probe.wrong > 0 || r.all.probe.wrong > 0
}

// runMode deploys mode m in every cluster, measures it, and stops it.
func (f *fleetData) runMode(m mode) *modeResult {
	r := &modeResult{m: m}
	before := f.readAPIs()
	r.etcd[0] = etcdSize(f.env)
	t := time.Now()
	logf("%s: starting %d controllers and %d DNS replicas", m, len(f.clusters), len(f.clusters)*f.cfg.replicas)
	d, err := f.deploy(m)
	if err != nil {
		r.fail("deploy: %v", err)
		return r
	}
	defer d.stop()
	if r.settle, err = f.waitNames(d, f.cfg.settle); err != nil {
		r.fail("%v", err)
		return r
	}
	r.settle = time.Since(t)
	if err := f.waitLinks(d, 5*time.Minute); err != nil {
		r.fail("%v", err)
	}
	r.startup = minusAll(f.readAPIs(), before)
	r.etcd[1] = etcdSize(f.env)
	logf("%s: every replica holds every name %.1fs after the start; etcd %.1f → %.1f MiB", m, r.settle.Seconds(), r.etcd[0]/(1<<20), r.etcd[1]/(1<<20))
	r.check = f.sampleCheck(d)
	logf("%s: %d sampled names checked: %d wrong, %d unanswered %s", m, r.check.asked, r.check.wrong, r.check.unanswered, r.check.firstWrong)

	f.steadyWindow(d, r)

	t = time.Now()
	a0 := f.readAPIs()
	r.prop, err = f.propagation(d)
	r.propFor = time.Since(t)
	r.propAPI = minusAll(f.readAPIs(), a0)
	if err != nil {
		r.fail("propagation: %v", err)
	}
	logf("%s: propagation of %d changes: p50 %s, p99 %s", m, len(r.prop), percentile(r.prop, 0.5), percentile(r.prop, 0.99))

	r.cold = f.coldStart(d)
	if r.cold.err != "" {
		r.fail("cold start: %s", r.cold.err)
	}
	if f.cfg.restartOne {
		r.one = f.recover(d, []int{1 % len(f.clusters)})
		if r.one.err != "" {
			r.fail("restart of one API server: %s", r.one.err)
		}
	}
	if f.cfg.restartN {
		all := make([]int, len(f.clusters))
		for c := range all {
			all[c] = c
		}
		r.all = f.recover(d, all)
		if r.all.err != "" {
			r.fail("restart of every API server: %s", r.all.err)
		}
	}
	r.after = f.sampleCheck(d)
	d.mu.Lock()
	r.restarts = d.restarts
	d.mu.Unlock()
	logf("%s: after the restarts, %d sampled names checked: %d wrong, %d unanswered %s", m, r.after.asked, r.after.wrong, r.after.unanswered, r.after.firstWrong)
	return r
}

// steadyWindow measures cfg.window of the settled fleet under unexported
// churn: CPU of every process, the API servers' counters, what the links
// received, and the replicas' memory at its end.
func (f *fleetData) steadyWindow(d *deployment, r *modeResult) {
	dnsPIDs, ctlPIDs := d.pids()
	pl0, err := f.readAll(d)
	if err != nil {
		r.fail("steady window: %v", err)
		return
	}
	a0 := f.readAPIs()
	dns0, _ := usage(dnsPIDs)
	ctl0, _ := usage(ctlPIDs)
	t := time.Now()
	stop := make(chan struct{})
	done := make(chan int)
	go func() { done <- f.churn(f.cfg.churnRate, stop) }()
	time.Sleep(f.cfg.window)
	close(stop)
	r.churn = <-done
	r.window = time.Since(t)
	dns1, rss := usage(dnsPIDs)
	ctl1, crss := usage(ctlPIDs)
	r.steady = minusAll(f.readAPIs(), a0)
	pl1, err := f.readAll(d)
	if err != nil {
		r.fail("steady window: %v", err)
		return
	}
	for i := range dns1 {
		r.dnsCPU = append(r.dnsCPU, dns1[i]-dns0[i])
		r.events[0] += pl1.dns[i].events - pl0.dns[i].events
	}
	for i := range ctl1 {
		r.ctlCPU = append(r.ctlCPU, ctl1[i]-ctl0[i])
		r.events[1] += pl1.ctl[i].events - pl0.ctl[i].events
	}
	r.dnsRSS, r.ctlRSS = rss, crss
	var mu sync.Mutex
	var wg sync.WaitGroup
	r.dnsHeap = make([]int64, len(d.replicas))
	for i, rep := range d.replicas {
		wg.Go(func() {
			h, err := heapInuse(rep.pprof)
			if err != nil {
				mu.Lock()
				r.fail("heap of a %s replica: %v", f.name(rep.cluster), err)
				mu.Unlock()
			}
			r.dnsHeap[i] = h
		})
	}
	wg.Wait()
	path := filepath.Join(f.cfg.out, string(r.m)+".heap.pprof")
	if err := saveHeapProfile(d.replicas[0].pprof, path); err != nil {
		logf("%s: heap profile of %s's replica: %v", r.m, f.name(d.replicas[0].cluster), err)
	}
	logf("%s: steady %.0fs: %d unexported writes; received by DNS %.0f, by controllers %.0f objects", r.m, r.window.Seconds(), r.churn, r.events[0], r.events[1])
}

// readAPIs reads every API server's counters; one that cannot be read
// counts as zeros, and is logged.
func (f *fleetData) readAPIs() []apiCounters {
	out := make([]apiCounters, len(f.clusters))
	var wg sync.WaitGroup
	for c, cl := range f.clusters {
		wg.Go(func() {
			a, err := readAPI(cl)
			if err != nil {
				logf("%s: API server metrics: %v", cl.Name, err)
			}
			out[c] = a
		})
	}
	wg.Wait()
	return out
}

func minusAll(a, b []apiCounters) []apiCounters {
	out := make([]apiCounters, len(a))
	for i := range a {
		out[i] = a[i].minus(b[i])
	}
	return out
}

// coldResult is a fresh replica's start in the first cluster, beside the
// running ones.
type coldResult struct {
	links int           // its links: none in import mode
	lists time.Duration // the same lists alone, with client-go (direct mode)
	ready time.Duration // launch → serving (the ready plugin, and an answer)
	names time.Duration // launch → every name held
	heap  int64         // HeapInuse after a forced GC, then
	err   string
}

// coldStart starts one more replica in the first cluster, times it until
// it holds every name, and stops it. In direct mode its links are the
// fleet's, or -cold-links of them (coldlinks.go), and the same lists are
// timed alone first.
func (f *fleetData) coldStart(d *deployment) coldResult {
	var res coldResult
	secrets, complete := d.m.linkSecrets(), f.complete
	if d.m == direct {
		res.links = f.coldLinks()
		if f.cfg.coldLinks > 0 {
			secrets, complete = coldNS, f.coldComplete
			var err error
			if res.lists, err = f.coldLists(); err != nil {
				res.err = "lists: " + firstLine(err.Error())
				return res
			}
			logf("%s: the lists of %d links alone: %.2fs", d.m, res.links, res.lists.Seconds())
		}
	}
	t := time.Now()
	r, err := f.launchReplica(d.m, 0, secrets)
	if err != nil {
		res.err = firstLine(err.Error())
		return res
	}
	defer r.dns.Process.Stop()
	res.ready = time.Since(t)
	for deadline := t.Add(10 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, err := readLinks(r.dns.MetricsURL, dnsPrefix)
		if err == nil && complete(st) {
			res.names = time.Since(t)
			break
		}
		if time.Now().After(deadline) {
			res.err = fmt.Sprintf("%.0f names and %.0f addresses after 10 minutes", st.names, st.addrs)
			return res
		}
	}
	res.heap, err = heapInuse(r.pprof)
	if err != nil {
		res.err = err.Error()
	}
	rss, _ := proc.RSS(r.dns.Process.PID)
	logf("%s: cold start of a replica with %d links: serving after %.2fs, every name after %.2fs; HeapInuse %.1f MiB, RSS %.1f MiB",
		d.m, res.links, res.ready.Seconds(), res.names.Seconds(), mib(res.heap), mib(rss))
	return res
}

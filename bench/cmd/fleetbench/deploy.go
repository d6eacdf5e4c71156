package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// mode is where the linked clusters are watched from.
type mode string

const (
	// direct: every DNS replica watches every linked cluster (the
	// plugin's link Secrets, as the chart writes its block).
	direct mode = "direct"
	// imported: only the controller watches the linked clusters; the DNS
	// replicas read the mirrors it writes to the local API server.
	imported mode = "import"
)

// block is the DNS's mcmirror block after `cluster` and `kubeconfig` (the
// local cluster, as the bench runs the replicas off-cluster): the chart's
// (link_secrets, ttl 5) in direct mode; `source import` and no links in
// import mode.
func (m mode) block() []string {
	if m == imported {
		return []string{"source import", "ttl 5"}
	}
	return []string{"ttl 5"}
}

// linkSecrets is the namespace of the link Secrets the DNS follows.
func (m mode) linkSecrets() string {
	if m == imported {
		return ""
	}
	return linkNS
}

// controllerArgs are the controller's flags beyond the fleet's, as the
// chart runs it (leader election), and, in import mode, the flat-mode
// mirrors' EndpointSlices the replicas answer from.
func (m mode) controllerArgs() []string {
	a := []string{"--leader-elect", "--leader-elect-namespace=" + linkNS, "--v=0"}
	if m == imported {
		a = append(a, "--mirror-flat-endpoints")
	}
	return a
}

// replica is one DNS replica of a cluster.
type replica struct {
	cluster int
	dns     *harness.DNSServer
	pprof   string // host:port of its pprof plugin
}

// deployment is one mode's processes in every cluster.
type deployment struct {
	m        mode
	replicas []*replica

	mu          sync.Mutex
	controllers []*harness.Controller // by cluster; replaced when one exits
	restarts    int                   // controllers that exited and were started again
	stopping    bool
}

func (d *deployment) ctls() []*harness.Controller {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.controllers)
}

// shuttingDown is set when the run stops, interrupted or done: nothing is
// started again after it.
var shuttingDown atomic.Bool

// signalled reports whether a process's exit error says a signal ended it.
func signalled(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled()
		}
	}
	return false
}

// supervise starts the controller of cluster c again whenever it exits
// until the deployment stops, as its Deployment's pod would be: a
// controller that cannot renew its Lease (its API server down for longer
// than the renew deadline) exits on purpose.
func (f *fleetData) supervise(d *deployment, c int) {
	for {
		d.mu.Lock()
		ctl := d.controllers[c]
		d.mu.Unlock()
		<-ctl.Process.Done()
		_, err := ctl.Process.Exited()
		d.mu.Lock()
		// Stopped (by the deployment, or the run being interrupted), not
		// exited of itself: a signal, or the run going down.
		if d.stopping || shuttingDown.Load() || signalled(err) {
			d.mu.Unlock()
			return
		}
		d.restarts++
		d.mu.Unlock()
		logf("%s: the controller of %s exited (%v); starting it again", d.m, f.name(c), err)
		for {
			next, err := f.startController(d.m, c)
			if err == nil {
				d.mu.Lock()
				d.controllers[c] = next
				stopping := d.stopping
				d.mu.Unlock()
				if stopping {
					next.Process.Stop()
					return
				}
				break
			}
			logf("%s: controller of %s: %v", d.m, f.name(c), err)
			time.Sleep(time.Second)
		}
	}
}

// launchReplica starts a DNS replica of mode m in cluster c, with the links
// of the link Secrets in namespace secrets, and waits until it serves.
func (f *fleetData) launchReplica(m mode, c int, secrets string) (*replica, error) {
	port, err := harness.FreeTCPPort()
	if err != nil {
		return nil, err
	}
	r := &replica{cluster: c, pprof: "127.0.0.1:" + strconv.Itoa(port)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fl, err := f.env.LaunchFleet(ctx, harness.FleetOptions{
		Local:       f.name(c),
		Parts:       harness.FleetDNS,
		LinkSecrets: secrets,
		Plugins:     []string{"pprof " + r.pprof},
		Block:       m.block(),
	})
	if err != nil {
		return nil, err
	}
	r.dns = fl.DNS
	return r, nil
}

// startController starts the mirror controller of mode m in cluster c.
func (f *fleetData) startController(m mode, c int) (*harness.Controller, error) {
	fl, err := f.env.LaunchFleet(context.Background(), harness.FleetOptions{
		Local:       f.name(c),
		Parts:       harness.FleetController,
		LinkSecrets: linkNS,
		Controller:  harness.ControllerOptions{Metrics: true, Args: m.controllerArgs()},
	})
	if err != nil {
		return nil, err
	}
	return fl.Controller, nil
}

// deploy starts mode m's replicas, then its controllers, in every
// cluster. The replicas come first so that they list their clusters before
// the controllers write every mirror: on a loaded machine a replica
// started in that storm may not be ready within the harness's minute.
func (f *fleetData) deploy(m mode) (*deployment, error) {
	d := &deployment{m: m, controllers: make([]*harness.Controller, len(f.clusters))}
	var mu sync.Mutex
	err := f.each(func(c int) error {
		for range f.cfg.replicas {
			r, err := f.launchReplica(m, c, m.linkSecrets())
			if err != nil {
				return err
			}
			mu.Lock()
			d.replicas = append(d.replicas, r)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		d.stop()
		return nil, err
	}
	err = f.each(func(c int) error {
		ctl, err := f.startController(m, c)
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.controllers[c] = ctl
		d.mu.Unlock()
		return nil
	})
	for c, ctl := range d.controllers {
		if ctl != nil {
			go f.supervise(d, c)
		}
	}
	if err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

func (d *deployment) stop() {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range d.replicas {
		wg.Go(func() { r.dns.Process.Stop() })
	}
	for _, c := range d.ctls() {
		if c != nil {
			wg.Go(func() { c.Process.Stop() })
		}
	}
	wg.Wait()
}

// procs are the deployment's processes' PIDs: replicas, then controllers.
func (d *deployment) pids() (dns, ctl []int) {
	for _, r := range d.replicas {
		dns = append(dns, r.dns.Process.PID)
	}
	for _, c := range d.ctls() {
		ctl = append(ctl, c.Process.PID)
	}
	return dns, ctl
}

// usage is CPU seconds and RSS of processes.
func usage(pids []int) (cpu []float64, rss []int64) {
	for _, p := range pids {
		cpu = append(cpu, proc.CPUSeconds(p))
		n, _ := proc.RSS(p)
		rss = append(rss, n)
	}
	return cpu, rss
}

// emptyPoint is the HeapInuse of a replica of mode m in the first cluster
// once that cluster's own Services exist and before any other cluster's
// do: what a replica holds without a linked cluster's endpoint.
func (f *fleetData) emptyPoint(m mode) emptyResult {
	e := emptyResult{m: m}
	r, err := f.launchReplica(m, 0, m.linkSecrets())
	if err != nil {
		e.err = firstLine(err.Error())
		logf("%s: empty replica: %v", m, err)
		return e
	}
	defer r.dns.Process.Stop()
	if err = f.waitLinks(&deployment{m: m, replicas: []*replica{r}}, time.Minute); err == nil {
		err = f.waitOwnNames(r, time.Minute)
	}
	if err != nil {
		e.err = err.Error()
		return e
	}
	if e.heap, err = heapInuse(r.pprof); err != nil {
		e.err = err.Error()
	}
	e.rss, _ = proc.RSS(r.dns.Process.PID)
	if err := saveHeapProfile(r.pprof, filepath.Join(f.cfg.out, string(m)+"-empty.heap.pprof")); err != nil {
		logf("%s: heap profile of the empty replica: %v", m, err)
	}
	logf("%s: empty replica: HeapInuse %.1f MiB, RSS %.1f MiB", m, mib(e.heap), mib(e.rss))
	return e
}

type emptyResult struct {
	m         mode
	heap, rss int64
	err       string
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

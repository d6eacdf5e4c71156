// Command fleetbench is `make bench-fleet` (see bench/README.md, "Fleet"):
// N clusters linked in a full mesh, each with R DNS replicas (coredns-mc
// with the chart's mcmirror block) and one mirror controller, S exported
// Services of E endpoints per cluster and unexported churn, run once per
// mode ("direct": every DNS replica watches every linked cluster;
// "import": only the controller does, and the replicas read what it
// writes locally). It reports per API server the watches, LISTs, bytes
// and CPU, per DNS replica memory and CPU, cold start, recovery after API
// server restarts, propagation, and a check of sampled names of every
// cluster in every cluster, side by side, in bench/out/fleet.md.
//
// It runs from a checkout (with $MCMIRROR_TESTBIN) or from the directory
// bench/fleet-archive.sh packs: the bench, coredns-mc, kube-apiserver, etcd
// and deploy/remote-link.yaml. It never runs under `go test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

var logf = proc.Logger("fleetbench", 7)

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "fleetbench: %v\n", err)
	os.Exit(2)
}

// config is the run's flags.
type config struct {
	clusters, replicas   int
	services, endpoints  int
	modes                []mode
	coldLinks            int           // links of the cold-started replica in direct mode (0: N−1)
	samples              int           // names checked per replica and cluster
	changes              int           // endpoint changes timed for propagation
	churnRate            int           // unexported objects created and deleted per second per cluster
	window               time.Duration // steady-state window, with the churn
	settle               time.Duration // how long a mode may take to hold every name
	out, cmc, bin, repo  string
	restartOne, restartN bool
}

func main() {
	var cfg config
	var modes string
	self, _ := os.Executable()
	dir := filepath.Dir(self)
	flag.IntVar(&cfg.clusters, "clusters", 20, "clusters, linked in a full mesh (at most 160)")
	flag.IntVar(&cfg.replicas, "replicas", 2, "DNS replicas per cluster")
	// 100 × 100: 10,000 endpoints per cluster, as many as 1,000 Services of
	// 10 would have, in a tenth of the Services. Each Service is also a
	// mirror Service in every other cluster, and those are what a 2-core,
	// 24 GiB machine cannot hold at 20 × 1,000 (bench/README.md, Fleet).
	flag.IntVar(&cfg.services, "services", 100, "exported Services per cluster")
	flag.IntVar(&cfg.endpoints, "endpoints", 100, "endpoints per exported Service (one EndpointSlice, at most 1000)")
	flag.IntVar(&cfg.coldLinks, "cold-links", 0, "links of the replica the direct-mode cold start times (0: the fleet's N−1; more are extra names for the same clusters, so that a start with 99 links can be timed with fewer API servers)")
	flag.StringVar(&modes, "modes", "direct,import", "modes to run, in order: direct, import")
	flag.IntVar(&cfg.samples, "samples", 4, "names checked per DNS replica and cluster (half Service names, half pod names)")
	flag.IntVar(&cfg.changes, "changes", 100, "endpoint changes timed to every cluster (propagation)")
	flag.IntVar(&cfg.churnRate, "churn", 10, "unexported pods and EndpointSlices created and deleted per second in each cluster during the steady window")
	flag.DurationVar(&cfg.window, "window", 30*time.Second, "steady-state window: CPU and events under the unexported churn")
	flag.DurationVar(&cfg.settle, "settle", 30*time.Minute, "how long a mode may take until every replica holds every name")
	flag.BoolVar(&cfg.restartOne, "restart-one", true, "restart one API server and time the recovery")
	flag.BoolVar(&cfg.restartN, "restart-all", true, "restart every API server at once and time the recovery")
	flag.StringVar(&cfg.out, "out", "bench/out", "directory for fleet.md and the logs")
	flag.StringVar(&cfg.cmc, "coredns-mc", firstFile(filepath.Join(dir, "coredns-mc"), "bin/coredns-mc"), "coredns-mc binary (not a race build)")
	flag.StringVar(&cfg.bin, "bin", firstDir(dir, os.Getenv("MCMIRROR_TESTBIN")), "directory of kube-apiserver and etcd ($MCMIRROR_TESTBIN)")
	flag.StringVar(&cfg.repo, "repo", firstDir(dir, ""), "directory holding deploy/remote-link.yaml (empty: this checkout)")
	flag.Parse()
	if err := cfg.validate(modes); err != nil {
		fatal(err)
	}
	// The harness finds its binaries and files through the environment.
	for k, v := range map[string]string{"MCMIRROR_TESTBIN": cfg.bin, "MCMIRROR_COREDNS_MC": cfg.cmc, "MCMIRROR_REPO": cfg.repo} {
		if v != "" {
			os.Setenv(k, v)
		}
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fatal(err)
	}
	var opts []harness.ClusterOptions
	for i := range cfg.clusters {
		opts = append(opts, harness.ClusterOptions{Name: clusterName(i, cfg.clusters)})
	}
	env := harness.New(harness.Options{Clusters: opts, StartTimeout: 3*time.Minute + time.Duration(cfg.clusters)*10*time.Second})
	proc.Main(env, logf, func() { shuttingDown.Store(true) }, func() int { return run(env, &cfg) })
}

func (cfg *config) validate(modes string) error {
	switch {
	case cfg.clusters < 2 || cfg.clusters > 160:
		return fmt.Errorf("-clusters: 2 to 160, not %d", cfg.clusters)
	case cfg.replicas < 1:
		return fmt.Errorf("-replicas: at least 1")
	case cfg.services < 1 || cfg.endpoints < 1 || cfg.endpoints > 1000:
		return fmt.Errorf("-services at least 1, -endpoints 1 to 1000")
	case cfg.clusters*cfg.services*cfg.endpoints > addrSpace:
		return fmt.Errorf("-clusters × -services × -endpoints over %d addresses", addrSpace)
	case cfg.coldLinks < 0:
		return fmt.Errorf("-cold-links: at least 0")
	case cfg.changes > changeSpace:
		return fmt.Errorf("-changes: at most %d", changeSpace)
	}
	for _, m := range strings.Split(modes, ",") {
		switch mode(m) {
		case direct, imported:
			cfg.modes = append(cfg.modes, mode(m))
		default:
			return fmt.Errorf("-modes: %q is neither direct nor import", m)
		}
	}
	if err := proc.Abs(&cfg.out, &cfg.cmc, &cfg.bin, &cfg.repo); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.cmc); err != nil {
		return fmt.Errorf("-coredns-mc: %w", err)
	}
	if cfg.bin == "" {
		return fmt.Errorf("-bin: no directory of kube-apiserver and etcd (set $MCMIRROR_TESTBIN or run from the archive)")
	}
	return nil
}

// firstFile is the first of paths that exists, else the last.
func firstFile(paths ...string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return paths[len(paths)-1]
}

// firstDir is dir when it holds kube-apiserver (the unpacked archive),
// else def.
func firstDir(dir, def string) string {
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil {
		return dir
	}
	return def
}

// clusterName is the name of the i-th of n clusters: c0..c9, c00..c99, ...
func clusterName(i, n int) string {
	return fmt.Sprintf("c%0*d", len(fmt.Sprint(n-1)), i)
}

func run(env *harness.Env, cfg *config) int {
	rep := &report{cfg: cfg, started: time.Now(), machine: proc.Machine(), load: proc.LoadAvg()}
	logf("starting %d clusters (kube-apiservers on one etcd)", cfg.clusters)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(cfg.clusters)*10*time.Second)
	err := env.Start(ctx)
	cancel()
	if err != nil {
		logf("harness: %v", err)
		return 1
	}
	rep.startup = time.Since(rep.started)
	logf("clusters ready in %.0fs (state and logs in %s)", rep.startup.Seconds(), env.Dir)
	f := newFleet(env, cfg)
	if err := f.link(); err != nil {
		logf("links: %v", err)
		return 1
	}
	// The empty point's replica holds its own cluster's Services, as every
	// replica does, so that only the other clusters' count per endpoint.
	t := time.Now()
	if err := f.loadCluster(0); err != nil {
		logf("loading %s: %v", f.name(0), err)
		return 1
	}
	rep.loaded = time.Since(t)
	for _, m := range cfg.modes {
		rep.empty = append(rep.empty, f.emptyPoint(m))
	}
	t = time.Now()
	if err := f.load(1); err != nil {
		logf("loading: %v", err)
		return 1
	}
	rep.loaded += time.Since(t)
	logf("loaded %d Services and %d endpoints per cluster in %.0fs", cfg.services, cfg.services*cfg.endpoints, rep.loaded.Seconds())
	for _, m := range cfg.modes {
		rep.modes = append(rep.modes, f.runMode(m))
	}
	rep.finished = time.Now()
	// Direct first in the table, import beside it, whatever the order run.
	slices.SortStableFunc(rep.modes, func(a, b *modeResult) int { return boolInt(a.m == imported) - boolInt(b.m == imported) })
	text := rep.String()
	fmt.Println(text)
	path := filepath.Join(cfg.out, "fleet.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	logf("results in %s", path)
	for _, r := range rep.modes {
		if r.failed() {
			return 1
		}
	}
	return 0
}

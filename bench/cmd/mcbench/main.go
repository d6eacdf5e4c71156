// Command mcbench is the side-by-side benchmark of `make bench` (see
// bench/README.md): it starts real clusters with the test harness, loads
// them with the same records in several layouts, runs the DNS servers under
// test pinned to one core, drives them with dnsperf from the other, and
// prints one table of medians and ratios.
//
//	A10  coredns-mc, plugin mcmirror, 10 linked clusters (flat-mode exports)
//	A1   coredns-mc, plugin mcmirror, 1 linked cluster, same records
//	Agw  coredns-mc, plugin mcmirror, 10 linked clusters, gateway-mode
//	     exports answered with local mirror ClusterIPs
//	B    coredns-mc, plugin kubernetes only, the equivalent headless names
//	C    coredns-mc, plugin file, a zone with A10's records
//	D    dnsref, a bare miekg/dns server answering from a map (the ceiling)
//
// It is run by bench/run.sh, which builds the binaries it needs; it never
// runs under `go test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

var (
	serverCPU = "0"
	clientCPU = "1"
)

var logf = proc.Logger("mcbench", 6)

type config struct {
	cmc, ref, out  string
	baseline       string // a second coredns-mc, run as A10base; "" for none
	sizes          []int
	runs           int
	dur            time.Duration
	propN, exportN int
	memSteps       []int         // services per cluster (100 endpoints each)
	memRepeats     int           // fresh processes per memory point, the median taken
	cold           int           // Services per cluster for the cold start; 0 skips
	coldProfile    time.Duration // CPU profile of the cold start, from the pprof listener's start
	relist         bool          // measure the heap through a relist of every link after the cold start
	pluginTest     string        // the plugin's test binary, to profile the per-query forms that miss; "" skips
}

func main() {
	var cfg config
	var sizes, mem string
	flag.StringVar(&cfg.cmc, "coredns-mc", "bin/coredns-mc", "coredns-mc binary")
	flag.StringVar(&cfg.ref, "dnsref", "bin/dnsref", "dnsref binary (server D)")
	flag.StringVar(&cfg.baseline, "baseline", "", "another coredns-mc binary (an earlier build), run as server A10base with A10's Corefile beside the others, to compare two builds in the same runs")
	flag.StringVar(&cfg.out, "out", "bench/out", "directory for Corefiles, zones, logs and results")
	flag.StringVar(&sizes, "sizes", "1000,10000", "endpoint names per server, comma-separated (multiples of 10); empty skips the throughput and the propagation")
	flag.IntVar(&cfg.runs, "runs", 5, "interleaved dnsperf runs per server and size")
	flag.DurationVar(&cfg.dur, "duration", 5*time.Second, "length of one dnsperf run")
	flag.IntVar(&cfg.propN, "changes", 250, "remote EndpointSlice changes for the propagation latency")
	flag.IntVar(&cfg.exportN, "exports", 200, "new exports for the new-export latency")
	flag.StringVar(&goBenchFile, "gobench", goBenchFile, "output of the plugin's Go benchmarks, for the report")
	flag.StringVar(&cfg.pluginTest, "plugin-test", "", "the plugin's test binary (go test -c ./plugin/mcmirror), to CPU-profile each per-query form of -gobench that misses the target; empty skips")
	flag.StringVar(&mem, "mem", "10,100", "memory steps: Services of 100 endpoints per cluster (x10 clusters); empty skips")
	flag.IntVar(&cfg.memRepeats, "mem-repeats", 3, "fresh processes measured per memory point, the median of each figure taken")
	flag.IntVar(&cfg.cold, "cold", 10000, "exported Services per linked cluster for the cold start (x10 clusters); 0 skips")
	flag.DurationVar(&cfg.coldProfile, "cold-profile", 10*time.Second, "length of the CPU profile of the cold start")
	flag.BoolVar(&cfg.relist, "relist", true, "after the cold start, restart the 10 linked API servers and sample the heap through the relists")
	flag.StringVar(&serverCPU, "server-cpu", serverCPU, "CPU the servers are pinned to")
	flag.StringVar(&clientCPU, "client-cpu", clientCPU, "CPU dnsperf is pinned to")
	flag.Parse()
	cfg.sizes = numbers(sizes, "-sizes: bad size", func(n int) bool { return n >= 10 && n%10 == 0 })
	cfg.memSteps = numbers(mem, "-mem: bad step", func(n int) bool { return n > 0 })
	if err := proc.Abs(&cfg.cmc, &cfg.ref, &cfg.out, &cfg.baseline, &cfg.pluginTest); err != nil {
		fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.out, "logs"), 0o755); err != nil {
		fatal(err)
	}

	env := harness.New(harness.Options{Clusters: clusterOpts(), StartTimeout: 5 * time.Minute})
	proc.Main(env, logf, nil, func() int { return run(env, &cfg) })
}

// numbers parses a comma-separated flag (empty: none) of numbers that ok
// accepts, and exits, saying what of the first other, if there is one.
func numbers(list, what string, ok func(int) bool) []int {
	if list == "" {
		return nil
	}
	var out []int
	for s := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || !ok(n) {
			fatal(fmt.Errorf("%s %q", what, s))
		}
		out = append(out, n)
	}
	return out
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "mcbench: %v\n", err)
	os.Exit(2)
}

func clusterOpts() []harness.ClusterOptions {
	opts := []harness.ClusterOptions{{Name: "east"}}
	for c := range 10 {
		opts = append(opts, harness.ClusterOptions{Name: fmt.Sprintf("c%d", c)})
	}
	return opts
}

func run(env *harness.Env, cfg *config) int {
	rep := newReport(cfg)
	logf("starting 11 clusters (east + c0..c9) with the test harness")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err := env.Start(ctx)
	cancel()
	if err != nil {
		logf("harness: %v", err)
		return 1
	}
	logf("clusters ready (state in %s)", env.Dir)
	if err := namespaces(env); err != nil {
		logf("namespaces: %v", err)
		return 1
	}
	if err := loadProp(env); err != nil {
		logf("propagation Services: %v", err)
		return 1
	}

	// 1, 4: throughput, growing the data sets from one size to the next.
	loaded := 0
	var a10 *server
	for si, size := range cfg.sizes {
		svcs := size / perSvc
		if svcs > loaded {
			t := time.Now()
			n, err := loadThroughput(env, loaded, svcs)
			if err != nil {
				logf("loading: %v", err)
				return 1
			}
			logf("loaded s%d..s%d: %d objects in %.1fs", loaded, svcs-1, n, time.Since(t).Seconds())
			t = time.Now()
			n, err = loadGateway(env, loaded, svcs)
			if err != nil {
				logf("loading the gateway-mode set: %v", err)
				return 1
			}
			logf("loaded gwt s%d..s%d and their mirrors: %d objects in %.1fs", loaded, svcs-1, n, time.Since(t).Seconds())
			loaded = svcs
		}
		last := si == len(cfg.sizes)-1
		servers, err := startThroughputServers(env, cfg, svcs)
		if err != nil {
			logf("%v", err)
			return 1
		}
		qfiles := map[string]string{}
		for _, s := range servers {
			qfiles[s.key] = filepath.Join(cfg.out, fmt.Sprintf("queries.%s.%d", s.key, size))
			if err := writeQueries(qfiles[s.key], s.expect); err != nil {
				logf("%v", err)
				return 1
			}
		}
		logf("size %d: %d names per server; %d interleaved runs of %s", size, len(servers[0].expect), cfg.runs, cfg.dur)
		res := interleave(servers, qfiles, cfg.runs, cfg.dur, filepath.Join(cfg.out, "logs"))
		rep.throughput(size, len(servers[0].expect), res)
		if last {
			// CPU profiles of A10 and A1 under the same load, for where
			// the time goes and what 10 links cost more than 1.
			for _, s := range servers {
				if s.key == "A10" || s.key == "A1" {
					rep.profiles = append(rep.profiles, profileUnderLoad(s, qfiles[s.key], cfg))
				}
			}
		}
		for _, s := range servers {
			if last && s.key == "A10" {
				a10 = s
				continue
			}
			s.proc.Stop()
		}
	}

	// 3: propagation, on the A10 server that holds the largest set.
	if a10 != nil && cfg.propN > 0 {
		logf("propagation: %d remote EndpointSlice changes", cfg.propN)
		l, err := propagation(env, a10, cfg.propN)
		if err != nil {
			logf("propagation: %v", err)
			rep.propErr = err.Error()
		}
		rep.prop = l
		a10.proc.Stop()
	}

	// 2: memory.
	if len(cfg.memSteps) == 0 {
		rep.memErr = "skipped (-mem \"\")"
	} else if err := memory(env, cfg, rep); err != nil {
		logf("memory: %v", err)
		rep.memErr = err.Error()
	}

	// Cold start: 10 links x cfg.cold exported Services.
	if cfg.cold > 0 {
		c, err := coldStart(env, cfg, cfg.cold)
		if err != nil {
			logf("cold start: %v", err)
			rep.coldErr = err.Error()
		}
		rep.cold = c
	}

	// 5: new exports, through the controller.
	if cfg.exportN > 0 {
		exportLatency(env, cfg, rep)
	}

	// The per-query forms that miss the target, each profiled alone, with
	// the servers stopped.
	if cfg.pluginTest != "" {
		forms := missedForms(readGoBench(goBenchFile))
		logf("profiling %d per-query forms that miss the target", len(forms))
		rep.forms = profileForms(cfg.pluginTest, cfg.out, "2s", forms)
	}

	text := rep.String()
	fmt.Println(text)
	_ = os.WriteFile(filepath.Join(cfg.out, "results.md"), []byte(text), 0o644)
	logf("results in %s", filepath.Join(cfg.out, "results.md"))
	return 0
}

// mcmirrorCorefile is the Corefile of an A server: plugin mcmirror alone,
// linked to the given clusters, exporting the set sel.
func mcmirrorCorefile(env *harness.Env, remotes []string, sel string) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".:{PORT} {\n    bind 127.0.0.1\n    ready 127.0.0.1:{READY}\n    {PPROF}\n")
	fmt.Fprintf(&b, "    mcmirror cluster.local {\n        cluster east\n        kubeconfig %s\n", env.Cluster("east").Kubeconfig)
	for _, r := range remotes {
		fmt.Fprintf(&b, "        link %s %s\n", r, env.Cluster(r).Kubeconfig)
	}
	fmt.Fprintf(&b, "        export_selector %s\n        startup_timeout 120s\n    }\n}\n", sel)
	return b.String()
}

func remotes(n int) []string {
	var out []string
	for c := range n {
		out = append(out, fmt.Sprintf("c%d", c))
	}
	return out
}

func startThroughputServers(env *harness.Env, cfg *config, svcs int) ([]*server, error) {
	ten := expectTen(svcs)
	zone := filepath.Join(cfg.out, fmt.Sprintf("zone.%d", svcs*perSvc))
	if err := writeZone(zone, ten); err != nil {
		return nil, err
	}
	cmc := []string{"-conf", "{CONF}"}
	opts := []serverOpts{
		{key: "A10", what: "coredns-mc: mcmirror, 10 linked clusters", bin: cfg.cmc, args: cmc, expect: ten, pprof: true,
			corefile: mcmirrorCorefile(env, remotes(10), "mirror.linkerd.io/exported=remote-discovery,mcbench=ten")},
	}
	if cfg.baseline != "" {
		opts = append(opts, serverOpts{key: "A10base", what: "the -baseline build of coredns-mc, A10's Corefile", bin: cfg.baseline, args: cmc, expect: ten,
			corefile: opts[0].corefile})
	}
	opts = append(opts, []serverOpts{
		{key: "A1", what: "coredns-mc: mcmirror, 1 linked cluster", bin: cfg.cmc, args: cmc, expect: expectOne(svcs), pprof: true,
			corefile: mcmirrorCorefile(env, remotes(1), "mirror.linkerd.io/exported=remote-discovery,mcbench=one")},
		{key: "Agw", what: "coredns-mc: mcmirror, 10 linked clusters, gateway mode (mirror ClusterIPs)", bin: cfg.cmc, args: cmc, expect: expectGateway(svcs),
			corefile: mcmirrorCorefile(env, remotes(10), "mirror.linkerd.io/exported=true,mcbench=gwt")},
		{key: "B", what: "coredns-mc: kubernetes plugin", bin: cfg.cmc, args: cmc, expect: expectLoc(svcs),
			corefile: fmt.Sprintf(".:{PORT} {\n    bind 127.0.0.1\n    ready 127.0.0.1:{READY}\n    kubernetes cluster.local {\n        kubeconfig %s\n    }\n}\n",
				env.Cluster("east").Kubeconfig)},
		{key: "C", what: "coredns-mc: file plugin", bin: cfg.cmc, args: cmc, expect: ten,
			corefile: fmt.Sprintf(".:{PORT} {\n    bind 127.0.0.1\n    ready 127.0.0.1:{READY}\n    file %s cluster.local\n}\n", zone)},
		{key: "D", what: "bare miekg/dns, precomputed map", bin: cfg.ref, expect: ten,
			args: []string{"-zone", zone, "-origin", "cluster.local.", "-addr", "127.0.0.1:{PORT}"}},
	}...)
	var servers []*server
	for _, o := range opts {
		o.cpu = serverCPU
		t := time.Now()
		s, err := startServer(cfg.out, o)
		if err != nil {
			for _, s := range servers {
				s.proc.Stop()
			}
			return nil, err
		}
		logf("%s up and verified (%d names) in %.1fs", o.key, len(o.expect), time.Since(t).Seconds())
		servers = append(servers, s)
	}
	return servers, nil
}

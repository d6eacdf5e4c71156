// Command gwbench is the gateway part of `make bench` (see bench/README.md,
// "Gateway"): on this machine, in one run, interleaved, it compares three
// ways from a TCP client to a server running in a pod of cluster west:
//
//	direct   the client connects to the pod
//	gateway  client → `coredns-mc gateway` of east (egress) → mutual TLS,
//	         HTTP/1.1 CONNECT → `coredns-mc gateway` of west (ingress) → pod
//	haproxy  client → HAProxy (mode tcp, TLS to the server) → mutual TLS →
//	         HAProxy (TLS terminated, routed by SNI) → pod
//
// for bulk throughput (1 and 16 streams), connection rate, round-trip
// latency, memory per idle connection and proxy CPU per GB, and writes
// <out>/gateway.md. The clusters are real API servers started with the test
// harness; west exports the Service, east holds its mirror with the egress
// ports recorded, as the controller would write it.
//
// The same binary plays the other parts, pinned with taskset:
//
//	gwbench target     the server in the pod (sink, echo, once ports)
//	gwbench client     the load generator
//	gwbench inproc     the gateway pair in one process, with pprof
//	gwbench handshake  the cost of the gateway's TLS handshakes
//
// bench/run.sh builds and runs it after the DNS benchmark; alone:
//
//	go build -o bin/coredns-mc ./cmd/coredns-mc && go build -o bin/gwbench ./bench/cmd/gwbench
//	bin/gwbench -out bench/out
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

var logf = proc.Logger("gwbench", 6)

type config struct {
	argv                []string
	cmc, haproxy, out   string
	self                string // this binary
	runs                int
	bulkDur, shortDur   time.Duration
	streams, conc, size int
	idle                int
	proxyCPU, clientCPU string
	profile             string
}

func main() {
	if len(os.Args) > 1 {
		sub := map[string]func([]string) int{"target": runTarget, "client": runClientCmd, "inproc": runInproc, "handshake": runHandshake}
		if f, ok := sub[os.Args[1]]; ok {
			os.Exit(f(os.Args[2:]))
		}
	}
	cfg := &config{argv: os.Args[1:]}
	flag.StringVar(&cfg.cmc, "coredns-mc", "bin/coredns-mc", "coredns-mc binary (`go build -o bin/coredns-mc ./cmd/coredns-mc`)")
	flag.StringVar(&cfg.haproxy, "haproxy", "", "haproxy binary (default: from PATH, or /usr/sbin/haproxy)")
	flag.StringVar(&cfg.out, "out", "bench/out", "directory for gateway.md, configurations, certificates, profiles and logs")
	flag.IntVar(&cfg.runs, "runs", 5, "interleaved runs of every measure")
	flag.DurationVar(&cfg.bulkDur, "duration", 3*time.Second, "sending time of one bulk run")
	flag.DurationVar(&cfg.shortDur, "short", 2*time.Second, "length of one connection-rate run and of one round-trip run")
	flag.IntVar(&cfg.streams, "streams", 16, "streams of the multi-stream bulk run")
	flag.IntVar(&cfg.conc, "concurrency", 16, "concurrent connections of the connection-rate run")
	flag.IntVar(&cfg.size, "size", 64, "request and answer size of round trips and connections (bytes)")
	flag.IntVar(&cfg.idle, "idle", 2000, "idle connections of the memory run")
	flag.StringVar(&cfg.proxyCPU, "proxy-cpu", "0", "CPU both proxies of a pair are pinned to")
	flag.StringVar(&cfg.clientCPU, "client-cpu", "1", "CPU the client and the target are pinned to")
	flag.StringVar(&cfg.profile, "profile", "auto", "profile the in-process gateway pair: auto (under the loads whose target was not met), always, never")
	flag.Parse()
	if flag.NArg() > 0 || cfg.runs < 1 || cfg.streams < 1 || cfg.conc < 1 || cfg.size < 1 || cfg.idle < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if !slices.Contains([]string{"auto", "always", "never"}, cfg.profile) {
		fatal(fmt.Errorf("-profile: want auto, always or never, not %q", cfg.profile))
	}
	if err := proc.Abs(&cfg.cmc, &cfg.out); err != nil {
		fatal(err)
	}
	var err error
	if _, err := os.Stat(cfg.cmc); err != nil {
		fatal(fmt.Errorf("%w (build it: go build -o bin/coredns-mc ./cmd/coredns-mc)", err))
	}
	if cfg.haproxy, err = haproxyBin(cfg.haproxy); err != nil {
		fatal(err)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		fatal(fmt.Errorf("taskset: %w (test/tools/deps.sh installs it)", err))
	}
	if cfg.self, err = os.Executable(); err != nil {
		fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.out, "logs"), 0o755); err != nil {
		fatal(err)
	}

	env := harness.New(harness.Options{Clusters: []harness.ClusterOptions{{Name: "east"}, {Name: "west"}}, StartTimeout: 3 * time.Minute})
	var w *world
	proc.Main(env, logf, func() {
		if w != nil {
			w.tb.cleanup()
		}
	}, func() int { return run(cfg, env, &w) })
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "gwbench: %v\n", err)
	os.Exit(2)
}

func run(cfg *config, env *harness.Env, wp **world) int {
	rep := &report{cfg: cfg, start: time.Now(), loadStart: proc.LoadAvg(), haproxyVersion: haproxyVersion(cfg.haproxy), source: source()}
	logf("load average %s; starting clusters east and west with the test harness", rep.loadStart)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.Start(ctx); err != nil {
		logf("harness: %v", err)
		return 1
	}
	w, err := setUpWorld(ctx, cfg, env)
	*wp = w
	if err != nil {
		logf("set-up: %v", err)
		return 1
	}
	rep.w = w
	logf("target pod at %s; west exports %s/%s, east mirrors it on egress ports %v", w.podIP, benchNS, benchSvc, w.egress)

	dir := direct(w)
	if err := waitWorking(dir, 30*time.Second); err != nil {
		logf("%v", err)
		return 1
	}
	gw, err := startGatewayPair(cfg, w, "main")
	if err != nil {
		logf("gateway pair: %v", err)
		return 1
	}
	hap, err := startHAProxyPair(cfg, w, "main")
	if err != nil {
		logf("HAProxy pair: %v", err)
		return 1
	}
	logf("all three setups carry connections correctly; %d interleaved runs", cfg.runs)
	res := newResults(cfg.runs)
	rep.res = res
	measureAll(cfg, []*setup{dir, gw, hap}, res)
	if keys, _ := rep.notMet(); cfg.profile == "always" || (cfg.profile == "auto" && slices.Contains(keys, "rr")) {
		logf("system calls per round trip (strace, one more round-trip run of each pair, not counted)")
		rep.sys = map[string]*syscallCount{}
		for _, s := range []*setup{gw, hap} {
			c, err := countSyscalls(cfg, s)
			if err != nil {
				rep.sysErr = err.Error()
				logf("strace %s: %v", s.key, err)
				break
			}
			rep.sys[s.key] = c
			logf("%s: %s", s.name, c)
		}
	}
	// Nil when a socket does not answer.
	rep.hapInfo, _ = haproxyInfo(hapSock(cfg, "west"))
	rep.hapEgressInfo, _ = haproxyInfo(hapSock(cfg, "east"))
	gw.stop()
	hap.stop()

	logf("memory: %d idle connections through fresh proxies, %d interleaved runs", cfg.idle, cfg.runs)
	memoryPhase(cfg, w, res)

	logf("TLS handshakes with the gateway's configurations")
	if hs, err := measureHandshakes(cfg, w); err != nil {
		rep.hsErr = err.Error()
		logf("handshakes: %v", err)
	} else {
		rep.hs = &hs
		logf("full %.0f µs CPU, resumed %.0f µs CPU (%d of %d resumed, %s)", hs.FullCPU, hs.ResCPU, hs.Resumed, hs.N, hs.Kex)
	}

	keys, mem := rep.notMet()
	switch cfg.profile {
	case "always":
		keys, mem = nil, true
		for _, m := range measures {
			keys = append(keys, m.key)
		}
	case "never":
		keys, mem = nil, false
	}
	if len(keys) > 0 || mem {
		logf("profiling the in-process gateway pair under %v (memory: %v)", keys, mem)
		rep.prof = profileGateway(cfg, w, keys, mem)
	}

	rep.loadEnd = proc.LoadAvg()
	rep.elapsed = time.Since(proc.Began)
	text := rep.String()
	fmt.Println(text)
	path := filepath.Join(cfg.out, "gateway.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	logf("results in %s; load average %s", path, rep.loadEnd)
	return 0
}

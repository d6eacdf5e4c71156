package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// `gwbench h2cmp` compares, in one run, interleaved, the gateway's HTTP/1.1
// CONNECT per connection with the HTTP/2 experiment (h2exp.go), both as
// `gwbench inproc` (egress and ingress in one process, pinned to one CPU,
// GOMAXPROCS=1) to a target on loopback served by this process (pinned to
// the other CPU): memory per idle connection (heap, stacks and RSS after a
// forced GC, 2,000 connections, one round trip each), 64-byte round trips
// on one connection, and 1-stream bulk to a sink. No clusters: this is the
// experiment behind bench/README.md's "Why HTTP/1.1 CONNECT per
// connection", not a part of `make bench`.

func selfRSS() int64 {
	n, _ := proc.RSS(os.Getpid())
	return n
}

// h2Sample is one proxy process's figures.
type h2Sample struct {
	heap, stack, rss, goroutines float64 // per idle connection (bytes; goroutines)
	p50, p99                     float64 // µs
	bulk                         float64 // MB/s
}

func runH2Cmp(args []string) int {
	fs := flag.NewFlagSet("gwbench h2cmp", flag.ContinueOnError)
	runs := fs.Int("runs", 3, "interleaved runs")
	idleN := fs.Int("idle", 2000, "idle connections")
	rrDur := fs.Duration("short", 2*time.Second, "round-trip run")
	bulkDur := fs.Duration("duration", 3*time.Second, "bulk run")
	proxyCPU := fs.String("proxy-cpu", "0", "CPU of the proxy process")
	protos := fs.String("protos", "h1,h2", "what to compare, each proto[:inproc flags separated by +]")
	cpuDir := fs.String("cpuprofiles", "", "directory for CPU profiles of the bulk and round-trip runs")
	heapDir := fs.String("profiles", "", "directory for heap and goroutine profiles of the idle connections (every allocation recorded; the other figures are then not comparable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "gwbench h2cmp:", err); return 1 }
	dir, err := os.MkdirTemp("", "h2cmp")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	ca, err := gatewaytest.NewCA("h2cmp")
	if err != nil {
		return fail(err)
	}
	for _, c := range []string{"east", "west"} {
		if _, err := ca.IssueFiles(dir, c, gatewaytest.Options{}); err != nil {
			return fail(err)
		}
	}
	// The target: echo and sink on 127.0.0.3, the pod's ports.
	const tip = "127.0.0.3"
	for port, serve := range map[int]func(net.Conn){sinkPort: serveSink, echoPort: serveEcho} {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", tip, port))
		if err != nil {
			return fail(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serve(c)
			}
		}()
	}
	self, _ := os.Executable()
	keys := strings.Split(*protos, ",")
	res := map[string][]h2Sample{}
	for r := range *runs {
		order := slices.Clone(keys)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			s, err := h2One(self, dir, tip, *proxyCPU, k, *idleN, *rrDur, *bulkDur, *heapDir, *cpuDir, r)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", k, err))
			}
			fmt.Fprintf(os.Stderr, "run %d %-40s heap %6.0f B stack %6.0f B rss %6.0f B goroutines %.2f | rr p50 %.1f p99 %.1f µs | bulk %.0f MB/s\n",
				r+1, k, s.heap, s.stack, s.rss, s.goroutines, s.p50, s.p99, s.bulk)
			res[k] = append(res[k], s)
		}
	}
	med := func(v []h2Sample, f func(h2Sample) float64) float64 {
		x := make([]float64, len(v))
		for i := range v {
			x[i] = f(v[i])
		}
		slices.Sort(x)
		return x[len(x)/2]
	}
	fmt.Println("| proto | heap/conn (KiB) | stacks/conn (KiB) | RSS/conn (KiB) | goroutines/conn | rr p50 (µs) | rr p99 (µs) | bulk 1 stream (MB/s) | p50 ÷ first's, per run | bulk ÷ first's, per run |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, k := range keys {
		v := res[k]
		ratios := func(f func(h2Sample) float64) string {
			x := make([]float64, len(v))
			for i := range v {
				x[i] = f(v[i]) / f(res[keys[0]][i])
			}
			slices.Sort(x)
			return fmt.Sprintf("%.2f (%.2f–%.2f)", x[len(x)/2], x[0], x[len(x)-1])
		}
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.0f | %s | %s |\n", k,
			med(v, func(s h2Sample) float64 { return s.heap / 1024 }), med(v, func(s h2Sample) float64 { return s.stack / 1024 }),
			med(v, func(s h2Sample) float64 { return s.rss / 1024 }), med(v, func(s h2Sample) float64 { return s.goroutines }),
			med(v, func(s h2Sample) float64 { return s.p50 }), med(v, func(s h2Sample) float64 { return s.p99 }),
			med(v, func(s h2Sample) float64 { return s.bulk }),
			ratios(func(s h2Sample) float64 { return s.p50 }), ratios(func(s h2Sample) float64 { return s.bulk }))
	}
	return 0
}

// h2One starts one inproc pair and measures it.
func h2One(self, certDir, tip, cpu, key string, idleN int, rrDur, bulkDur time.Duration, profDir, cpuDir string, run int) (h2Sample, error) {
	var s h2Sample
	proto, extra, _ := strings.Cut(key, ":")
	sinkE, err := freePort()
	if err != nil {
		return s, err
	}
	echoE, err := freePort()
	if err != nil {
		return s, err
	}
	argv := []string{"taskset", "-c", cpu, self, "inproc", "-proto", proto, "-certs", certDir, "-target", tip,
		"-egress", fmt.Sprintf("%d=%d,%d=%d", sinkPort, sinkE, echoPort, echoE)}
	if extra != "" {
		argv = append(argv, strings.Split(extra, "+")...)
	}
	if profDir != "" {
		argv = append(argv, "-memprofilerate", "1")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return s, err
	}
	if err := cmd.Start(); err != nil {
		return s, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var hello struct{ Pprof string }
	if err := json.NewDecoder(bufio.NewReader(out)).Decode(&hello); err != nil {
		return s, fmt.Errorf("inproc: %w", err)
	}
	echo := "127.0.0.1:" + strconv.Itoa(echoE)
	sink := "127.0.0.1:" + strconv.Itoa(sinkE)
	if err := waitDial(echo, 10*time.Second); err != nil {
		return s, err
	}
	// Warm: a few connections, then settle.
	for range 20 {
		if r := roundTrips(echo, 64, 10*time.Millisecond); r.Errors > 0 {
			return s, fmt.Errorf("warm-up: %s", r.FirstErr)
		}
	}
	time.Sleep(500 * time.Millisecond)
	before, err := getMemStats(hello.Pprof)
	if err != nil {
		return s, err
	}
	conns, err := openIdle(echo, idleN, 64)
	if err != nil {
		return s, err
	}
	// 2 s: the gateway's copy loops give larger buffers back after 1 s
	// without data.
	time.Sleep(2 * time.Second)
	after, err := getMemStats(hello.Pprof)
	if err != nil {
		return s, err
	}
	if profDir != "" {
		tag := fmt.Sprintf("%s/%s.run%d", profDir, strings.NewReplacer(":", "_", "+", "_").Replace(key), run+1)
		if err := fetch(hello.Pprof+"/debug/pprof/heap?gc=1", tag+".heap.pprof"); err != nil {
			return s, err
		}
		if err := fetch(hello.Pprof+"/debug/pprof/goroutine?debug=1", tag+".goroutines.txt"); err != nil {
			return s, err
		}
	}
	n := float64(idleN)
	s.heap = (float64(after.HeapInuse) - float64(before.HeapInuse)) / n
	s.stack = (float64(after.StackInuse) - float64(before.StackInuse)) / n
	s.rss = float64(after.RSS-before.RSS) / n
	s.goroutines = float64(after.Goroutines-before.Goroutines) / n
	for _, c := range conns {
		c.Close()
	}
	tag := fmt.Sprintf("%s/%s.run%d", cpuDir, strings.NewReplacer(":", "_", "+", "_").Replace(key), run+1)
	profile := func(name string, d time.Duration) func() error {
		if cpuDir == "" {
			return func() error { return nil }
		}
		errc := make(chan error, 1)
		go func() {
			errc <- fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", hello.Pprof, int(d.Seconds())), tag+"."+name+".cpu.pprof")
		}()
		return func() error { return <-errc }
	}
	wait := profile("rr", rrDur)
	rr := roundTrips(echo, 64, rrDur)
	if err := wait(); err != nil {
		return s, err
	}
	if rr.Errors > 0 {
		return s, fmt.Errorf("round trips: %s", rr.FirstErr)
	}
	s.p50, s.p99 = rr.P50, rr.P99
	wait = profile("bulk", bulkDur)
	b := bulk(sink, 1, bulkDur)
	if err := wait(); err != nil {
		return s, err
	}
	if b.Errors > 0 {
		return s, fmt.Errorf("bulk: %s", b.FirstErr)
	}
	s.bulk = float64(b.Bytes) / b.Seconds / 1e6
	return s, nil
}

// openIdle opens n connections, 16 at a time, each with one round trip of
// size bytes.
func openIdle(addr string, n, size int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	errc := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		go func() {
			var first error
			for i := range next {
				if first != nil {
					continue
				}
				c, err := dial(addr)
				if err != nil {
					first = err
					continue
				}
				req, resp := payload(size), make([]byte, size)
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(req); err != nil {
					first = err
					continue
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					first = err
					continue
				}
				_ = c.SetDeadline(time.Time{})
				conns[i] = c
			}
			errc <- first
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	for range 16 {
		if err := <-errc; err != nil {
			return nil, err
		}
	}
	return conns, nil
}

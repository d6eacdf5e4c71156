package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

// memSample is one memory run: fresh proxies, their resident memory before
// and with cfg.idle idle connections open through them.
type memSample struct {
	ok            bool
	why           string
	before, after int64 // VmRSS of both proxies, bytes
	conns         int64
	open          float64 // seconds to open them all
}

// perConn is the RSS increase per idle connection, in bytes.
func (m memSample) perConn() float64 {
	if m.conns == 0 {
		return 0
	}
	return float64(m.after-m.before) / float64(m.conns)
}

// memRatios is the gateway pair's memory per idle connection ÷ the HAProxy
// pair's, in each run where both were measured.
func (r *results) memRatios() []float64 {
	var out []float64
	gws, haps := r.mem["gateway"], r.mem["haproxy"]
	for i := range min(len(gws), len(haps)) {
		if gws[i].ok && haps[i].ok && haps[i].perConn() > 0 {
			out = append(out, gws[i].perConn()/haps[i].perConn())
		}
	}
	return out
}

// memoryPhase measures memory per idle connection, interleaved like the
// rest, each time on freshly started proxies: a Go process that has carried
// load before keeps its heap (and its RSS) grown, and would hide the cost of
// new connections.
func memoryPhase(cfg *config, w *world, res *results) {
	starters := map[string]func(*config, *world, string) (*setup, error){
		"gateway": startGatewayPair, "haproxy": startHAProxyPair,
	}
	for r := range cfg.runs {
		keys := []string{"gateway", "haproxy"}
		if r%2 == 1 {
			keys[0], keys[1] = keys[1], keys[0]
		}
		for _, k := range keys {
			m := memRun(cfg, w, starters[k], fmt.Sprintf("mem%d", r+1))
			res.mem[k][r] = m
			if m.ok {
				logf("  run %d/%d memory   %-7s %d idle connections in %.1fs: RSS %.1f -> %.1f MiB, %.1f KiB per connection",
					r+1, cfg.runs, k, m.conns, m.open, float64(m.before)/(1<<20), float64(m.after)/(1<<20), m.perConn()/1024)
			} else {
				logf("  run %d/%d memory   %-7s INVALID: %s", r+1, cfg.runs, k, m.why)
			}
		}
	}
}

func memRun(cfg *config, w *world, startPair func(*config, *world, string) (*setup, error), tag string) memSample {
	s, err := startPair(cfg, w, tag)
	if err != nil {
		return memSample{why: err.Error()}
	}
	defer s.stop()
	// Warm: handshakes, session caches, pools; then let it settle.
	if _, err := runClient(cfg, time.Minute, "-mode", "connrate", "-streams", "4", "-size", strconv.Itoa(cfg.size), "-duration", "500ms", "-addr", s.once); err != nil {
		return memSample{why: "warm-up: " + err.Error()}
	}
	time.Sleep(time.Second)
	before, err := s.rss()
	if err != nil {
		return memSample{why: err.Error()}
	}
	m := memSample{before: before}
	err = holdIdle(cfg, s.echo, func(ready clientResult) error {
		m.conns, m.open = ready.Conns, ready.Seconds
		if ready.Errors > 0 {
			return fmt.Errorf("%d connections failed, the first: %s", ready.Errors, ready.FirstErr)
		}
		time.Sleep(time.Second)
		m.after, err = s.rss()
		return err
	})
	if err == nil {
		err = s.alive()
	}
	if err != nil {
		m.why = err.Error()
		return m
	}
	m.ok = true
	return m
}

// holdIdle runs `gwbench client -mode idle` pinned to the client CPU,
// calls during once its connections are all open, then lets it check and
// close them.
func holdIdle(cfg *config, addr string, during func(clientResult) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := pinned(ctx, cfg, cfg.clientCPU, "client", "-mode", "idle", "-n", strconv.Itoa(cfg.idle),
		"-size", strconv.Itoa(cfg.size), "-addr", addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		if s := stderr.String(); s != "" {
			proc.AppendLog(filepath.Join(cfg.out, "logs", "gw-client.log"), s)
		}
	}()
	dec := json.NewDecoder(bufio.NewReader(stdout))
	var ready, final clientResult
	if err := dec.Decode(&ready); err != nil {
		stdin.Close()
		_ = cmd.Wait()
		return fmt.Errorf("idle client: %w: %s", err, stderr.String())
	}
	derr := during(ready)
	stdin.Close()
	if err := dec.Decode(&final); err != nil {
		_ = cmd.Wait()
		return fmt.Errorf("idle client, at the end: %w: %s", err, stderr.String())
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("idle client: %w", err)
	}
	if derr != nil {
		return derr
	}
	if final.Errors > 0 {
		return fmt.Errorf("%d connections failed, the first: %s", final.Errors, final.FirstErr)
	}
	return nil
}

package main

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/test/harness"
)

// setup is one way from the client to the target: direct, or through a
// pair of proxies (egress in east, ingress in west), both pinned to the
// proxy CPU.
type setup struct {
	key, name        string
	sink, echo, once string // where the client connects
	procs            []*proc.Proc
}

func (s *setup) addr(port int32) string {
	switch port {
	case sinkPort:
		return s.sink
	case echoPort:
		return s.echo
	}
	return s.once
}

// cpu is the CPU seconds the proxies have used so far.
func (s *setup) cpu() float64 {
	var t float64
	for _, p := range s.procs {
		t += proc.CPUSeconds(p.PID())
	}
	return t
}

// rss is the proxies' resident memory now.
func (s *setup) rss() (int64, error) {
	var t int64
	for _, p := range s.procs {
		n, err := proc.RSS(p.PID())
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.Name, err)
		}
		t += n
	}
	return t, nil
}

// alive says which proxy died, if one did.
func (s *setup) alive() error {
	for _, p := range s.procs {
		if p.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.Name, p.Err(), proc.Tail(p.Log, 20))
		}
	}
	return nil
}

func (s *setup) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop()
	}
}

func direct(w *world) *setup {
	at := func(p int) string { return net.JoinHostPort(w.podIP.String(), strconv.Itoa(p)) }
	return &setup{key: "direct", name: "direct", sink: at(sinkPort), echo: at(echoPort), once: at(oncePort)}
}

// startGatewayPair runs `coredns-mc gateway` for west (ingress only) and for
// east (egress only, peer west), each pinned to the proxy CPU with
// GOMAXPROCS=1, and waits until a connection through each egress port works.
func startGatewayPair(cfg *config, w *world, tag string) (*setup, error) {
	s := &setup{key: "gateway", name: "gateway pair"}
	ports := make([]int, 3)
	for i := 0; i < len(ports); {
		p, err := harness.FreeTCPPort()
		if err != nil {
			return nil, err
		}
		// Not one of the egress ports, free too while no egress
		// listens (a metrics address once took the echo port's).
		if !slices.Contains(slices.Collect(maps.Values(w.egress)), p) {
			ports[i] = p
			i++
		}
	}
	ingress := "127.0.0.1:" + strconv.Itoa(ports[0])
	gw := func(cluster string, port int, args ...string) []string {
		argv := []string{"taskset", "-c", cfg.proxyCPU, cfg.cmc, "gateway", "--cluster", cluster, "--kubeconfig", w.env.Cluster(cluster).Kubeconfig,
			"--metrics-addr", "127.0.0.1:" + strconv.Itoa(port)}
		return append(append(argv, args...), w.tls[cluster].Args()...)
	}
	west := gw("west", ports[1], "--ingress-address", ingress, "--egress=false", "--allow-selectorless", "bench/*")
	// The memory run opens 2,000 connections from one client address: the
	// data path is measured here, not the per-source bound (1,024 by
	// default).
	east := gw("east", ports[2], "--ingress-address", "", "--egress=true", "--egress-bind-address", "127.0.0.1", "--peer", "west="+ingress,
		"--max-connections-per-source", "0")
	for i, argv := range [][]string{west, east} {
		name := []string{"west", "east"}[i]
		p, err := proc.Start("gateway-"+name, filepath.Join(cfg.out, "logs", "gw-gateway-"+name+"."+tag+".log"), []string{"GOMAXPROCS=1"}, argv...)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
		if err := p.WaitHTTP("http://127.0.0.1:"+strconv.Itoa(ports[1+i])+"/readyz", 60*time.Second); err != nil {
			s.stop()
			return nil, fmt.Errorf("gateway %s: %w\n%s", name, err, proc.Tail(p.Log, 20))
		}
	}
	at := func(port int32) string { return "127.0.0.1:" + strconv.Itoa(w.egress[port]) }
	s.sink, s.echo, s.once = at(sinkPort), at(echoPort), at(oncePort)
	if err := waitWorking(s, 60*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	if w.cipherGW == "" {
		w.cipherGW = negotiated(w, ingress, true)
	}
	return s, nil
}

func waitWorking(s *setup, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := check(s) // s.alive() first
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never carried a connection correctly: %w", s.name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check proves each port of s works end to end: 1 MiB counted by the sink,
// three echoes on one connection then its orderly end, one once exchange.
func check(s *setup) error {
	if err := s.alive(); err != nil {
		return err
	}
	if err := checkSink(s.sink, 1<<20); err != nil {
		return fmt.Errorf("sink %s: %w", s.sink, err)
	}
	c, err := dial(s.echo)
	if err != nil {
		return fmt.Errorf("echo %s: %w", s.echo, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req, resp := payload(64), make([]byte, 64)
	for range 3 {
		if _, err := echo(c, req, resp); err != nil {
			return fmt.Errorf("echo %s: %w", s.echo, err)
		}
	}
	_ = c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) > 0 {
		return fmt.Errorf("echo %s: end: %d bytes more, %v", s.echo, len(rest), err)
	}
	if err := once(s.once, req, make([]byte, 65)); err != nil {
		return fmt.Errorf("once %s: %w", s.once, err)
	}
	return nil
}

func checkSink(addr string, n int) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		return err
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	var cnt [8]byte
	if _, err := io.ReadFull(c, cnt[:]); err != nil {
		return err
	}
	if got := binary.BigEndian.Uint64(cnt[:]); got != uint64(n) {
		return fmt.Errorf("counted %d of %d bytes", got, n)
	}
	return nil
}

// negotiated returns the TLS version, cipher suite and key exchange an
// ingress chooses for a client with east's certificate (a Go client:
// X25519MLKEM768 and X25519 offered; the ingress must be west's). The
// gateway's ingress gets a probe request.
func negotiated(w *world, addr string, probe bool) string {
	certs, err := gateway.LoadCerts(gateway.CertFiles{Cert: w.tls["east"].Cert, Key: w.tls["east"].Key, CA: w.tls["east"].CA})
	if err != nil {
		return "?: " + err.Error()
	}
	conf := certs.ClientConfig("west", nil)
	conf.NextProtos = nil
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return "?: " + err.Error()
	}
	defer c.Close()
	cs := c.ConnectionState()
	if probe {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET "+gateway.ProbePath+" HTTP/1.1\r\nHost: probe\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	}
	return fmt.Sprintf("%s %s, %s", tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite), cs.CurveID)
}

// haproxyBin finds Debian's haproxy.
func haproxyBin(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy", nil
	}
	return "", errors.New("haproxy not found: test/tools/deps.sh haproxy installs it")
}

// haproxyVersion is the first line of `haproxy -v`.
func haproxyVersion(bin string) string {
	out, err := exec.Command(bin, "-v").Output()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	line, _, _ = strings.Cut(line, " - ") // "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"
	return strings.TrimSpace(line)
}

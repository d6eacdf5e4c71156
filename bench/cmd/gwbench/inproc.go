package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The gateway has no profiling endpoint, so where its time goes is seen in
// `gwbench inproc`: the same gateway.Egress and gateway.Ingress as
// `coredns-mc gateway` runs, both in this one process (pinned like the
// pair, GOMAXPROCS=1), with net/http/pprof. Two differences from the real
// pair: the egress reads its mirror from a fake clientset, and the ingress
// resolves bench/bench from a map rather than from its informers' stores
// (one lookup per connection either way).

// staticResolver resolves bench/bench to the target pod.
type staticResolver struct{ ip netip.Addr }

func (r staticResolver) Resolve(d gateway.Destination) (netip.AddrPort, gateway.Reason) {
	if d.Namespace != benchNS || d.Service != benchSvc || d.Host != "" {
		return netip.AddrPort{}, gateway.ReasonNotExported
	}
	return netip.AddrPortFrom(r.ip, uint16(d.Port)), ""
}

func (staticResolver) HasSynced() bool { return true }

// memStats is what /memstats answers, after a forced GC.
type memStats struct {
	HeapInuse, HeapAlloc, StackInuse, Sys uint64
	Goroutines                            int
	RSS                                   int64 // VmRSS, bytes
}

// loadCerts loads east's and west's gateway certificates from dir.
func loadCerts(dir string) (east, west *gateway.Certs, err error) {
	load := func(c string) (*gateway.Certs, error) {
		return gateway.LoadCerts(gateway.CertFiles{Cert: filepath.Join(dir, c+".crt"), Key: filepath.Join(dir, c+".key"), CA: filepath.Join(dir, "ca.crt")})
	}
	if east, err = load("east"); err == nil {
		west, err = load("west")
	}
	return east, west, err
}

func runInproc(args []string) int {
	fs := flag.NewFlagSet("gwbench inproc", flag.ContinueOnError)
	certDir := fs.String("certs", "", "directory with east.crt, east.key, west.crt, west.key, ca.crt")
	target := fs.String("target", "", "the target pod's address")
	egress := fs.String("egress", "", "Service port=egress port, comma-separated")
	pprofAddr := fs.String("pprof", "127.0.0.1:0", "address of /debug/pprof and /memstats")
	memRate := fs.Int("memprofilerate", runtime.MemProfileRate, "runtime.MemProfileRate (1: every allocation)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	runtime.MemProfileRate = *memRate
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "gwbench inproc:", err); return 1 }
	ip, err := netip.ParseAddr(*target)
	if err != nil {
		return fail(err)
	}
	east, west, err := loadCerts(*certDir)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	in := &gateway.Ingress{Certs: west, Resolver: staticResolver{ip}}
	go func() { _ = in.Serve(ctx, ln) }()

	ports := map[string]int32{}
	var listen []string
	for kv := range strings.SplitSeq(*egress, ",") {
		k, v, _ := strings.Cut(kv, "=")
		sp, err1 := strconv.Atoi(k)
		ep, err2 := strconv.Atoi(v)
		if err1 != nil || err2 != nil {
			return fail(fmt.Errorf("-egress: bad %q", kv))
		}
		ports[labels.EgressPortKey(int32(sp), "TCP")] = int32(ep)
		listen = append(listen, "127.0.0.1:"+v)
	}
	client := fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: benchSvc + "-west", Namespace: benchNS,
		Labels: map[string]string{labels.ManagedBy: labels.ManagedByValue, labels.MirroredService: labels.MirroredServiceValue,
			labels.ClusterName: "west", labels.RemoteService: benchSvc},
		Annotations: map[string]string{labels.EgressPorts: labels.FormatEgressPorts(ports)},
	}})
	// No per-source bound: the memory run opens its 2,000 connections
	// from one address.
	eg := &gateway.Egress{Certs: east, Peers: gateway.StaticPeers{"west": ln.Addr().String()}, BindAddress: "127.0.0.1", MaxConnsPerSource: -1}
	go func() { _ = eg.Run(ctx, client) }()
	for _, a := range listen {
		if err := waitDial(a, 10*time.Second); err != nil {
			return fail(fmt.Errorf("egress never listened on %s: %w", a, err))
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/memstats", func(w http.ResponseWriter, r *http.Request) {
		// ?gcs=N: N forced collections (default 1); each may halve the
		// stacks of goroutines that use less than a quarter of theirs.
		gcs, err := strconv.Atoi(r.URL.Query().Get("gcs"))
		if err != nil || gcs < 1 {
			gcs = 1
		}
		for range gcs {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, _ := proc.RSS(os.Getpid())
		_ = json.NewEncoder(w).Encode(memStats{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse,
			Sys: ms.Sys, Goroutines: runtime.NumGoroutine(), RSS: rss})
	})
	pl, err := net.Listen("tcp", *pprofAddr)
	if err != nil {
		return fail(err)
	}
	go func() { _ = http.Serve(pl, mux) }()
	<-ctx.Done()
	return 0
}

// handshakeResult is what `gwbench handshake` measured.
type handshakeResult struct {
	N                 int     `json:"n"`
	FullWall, FullCPU float64 // µs per handshake, both ends
	ResWall, ResCPU   float64
	Resumed           int    `json:"resumed"` // of N in the resumed series
	Kex               string `json:"kex"`
}

// runHandshake measures TLS handshakes with the gateway's own TLS
// configurations (Certs.ServerConfig, Certs.ClientConfig): n full ones, and
// n with a session cache as the egress keeps one per peer. Client and server
// are both in this process, on one CPU: the CPU per handshake is both ends'.
// Each handshake is a new TCP connection, and the client reads one byte the
// server writes after it, so that the session ticket is read as the egress
// reads it (with the CONNECT answer).
func runHandshake(args []string) int {
	fs := flag.NewFlagSet("gwbench handshake", flag.ContinueOnError)
	certDir := fs.String("certs", "", "directory with east.crt, east.key, west.crt, west.key, ca.crt")
	n := fs.Int("n", 500, "handshakes of each kind")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "gwbench handshake:", err); return 1 }
	east, west, err := loadCerts(*certDir)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := west.ServerConfig()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, srv)
				if tc.Handshake() == nil {
					_, _ = tc.Write([]byte{1})
					_, _ = io.Copy(io.Discard, tc)
				}
			}()
		}
	}()
	var r handshakeResult
	r.N = *n
	series := func(cache tls.ClientSessionCache) (wall, cpu float64, resumed int, err error) {
		one := func() (bool, error) {
			c, err := tls.Dial("tcp", ln.Addr().String(), east.ClientConfig("west", cache))
			if err != nil {
				return false, err
			}
			defer c.Close()
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return false, err
			}
			r.Kex = c.ConnectionState().CurveID.String()
			return c.ConnectionState().DidResume, nil
		}
		if _, err := one(); err != nil { // primes the cache
			return 0, 0, 0, err
		}
		t0, c0 := time.Now(), selfCPU()
		for range *n {
			res, err := one()
			if err != nil {
				return 0, 0, 0, err
			}
			if res {
				resumed++
			}
		}
		return time.Since(t0).Seconds() / float64(*n) * 1e6, (selfCPU() - c0) / float64(*n) * 1e6, resumed, nil
	}
	if r.FullWall, r.FullCPU, _, err = series(nil); err != nil {
		return fail(err)
	}
	if r.ResWall, r.ResCPU, r.Resumed, err = series(tls.NewLRUClientSessionCache(64)); err != nil {
		return fail(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

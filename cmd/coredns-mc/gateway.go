package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/options"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

func init() {
	subcommands["gateway"] = runGateway
}

// gatewayGCPercent is the gateway's garbage collection target unless GOGC
// is set: a collection when the heap has grown by half what was live after
// the last, not by all of it. The gateway's heap is mostly the state of
// its connections, and its memory, not its CPU, is what bounds how many it
// holds: in gwbench's runs of 2026-11-26, 50 took the RSS of an idle
// connection through the pair from 58.6 to 52.7 KiB (HAProxy's pair: 58.1)
// for a connection rate 1.32x HAProxy's instead of 1.49x, round trips and
// bulk throughput within their spread (bench/README.md).
const gatewayGCPercent = 50

// gatewayGC sets gatewayGCPercent unless the environment sets GOGC.
func gatewayGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gatewayGCPercent)
	}
}

// gatewayCmd is `coredns-mc gateway`.
var gatewayCmd = component{name: "gateway",
	usage: "usage: coredns-mc gateway --cluster NAME --tls-cert FILE --tls-key FILE --tls-ca FILE [--peer NAME=HOST:PORT]... [flags]\n\n" +
		"The gateway between clusters: egress on the ports of the local mirror Services, ingress (mTLS) to this cluster's exported Services. See gateway/README.md."}

// runGateway runs the gateway: options, then a checked configuration with
// its certificates, client and listeners, then the gateway until a signal
// and its drain.
func runGateway(args []string) int {
	o := options.NewGateway()
	if code, ok := gatewayCmd.parse(args, o.AddFlags); !ok {
		return code
	}
	cfg, err := newGatewayConfig(o)
	if err != nil {
		return gatewayCmd.fail(err)
	}
	return cfg.run()
}

// gatewayConfig is what the gateway runs with: its options, checked and
// parsed, its certificates, the local cluster's client and its listeners.
type gatewayConfig struct {
	opts   *options.Gateway
	parsed options.CompletedGateway
	certs  *gateway.Certs
	client kubernetes.Interface
	// ingress and metrics are nil when their address is empty.
	ingress, metrics net.Listener
}

// newGatewayConfig checks o, loads the certificates, makes the client and
// listens, before anything else, so that a taken port is a clear start-up
// error. It also applies what o sets process-wide.
func newGatewayConfig(o *options.Gateway) (*gatewayConfig, error) {
	parsed, err := o.Complete()
	if err != nil {
		return nil, err
	}
	gatewayGC()
	if err := o.Verbosity.Apply(); err != nil {
		return nil, fmt.Errorf("-v: %w", err)
	}
	// Set even when it is the default (0), so that the budget's metric
	// says it from the start, not from the first grown buffer on.
	gateway.SetBufferBudget(o.BufferBudget)
	certs, err := gateway.LoadCerts(gateway.CertFiles{Cert: o.CertFile, Key: o.KeyFile, CA: o.CAFile, TrustDomain: o.TrustDomain})
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if certs.Cluster() != o.Cluster {
		return nil, fmt.Errorf("--tls-cert names cluster %q, not --cluster %q", certs.Cluster(), o.Cluster)
	}
	cfg, err := localConfig(o.Kube)
	if err != nil {
		return nil, err
	}
	client, err := newGatewayClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	g := &gatewayConfig{opts: o, parsed: parsed, certs: certs, client: client}
	if o.IngressAddress != "" {
		if g.ingress, err = net.Listen("tcp", o.IngressAddress); err != nil {
			return nil, fmt.Errorf("--ingress-address: %w", err)
		}
	}
	if o.MetricsAddress != "" {
		if g.metrics, err = net.Listen("tcp", o.MetricsAddress); err != nil {
			if g.ingress != nil {
				g.ingress.Close()
			}
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	return g, nil
}

// gatewayParts are the running parts of the gateway; each is nil when
// off.
type gatewayParts struct {
	exports *gateway.Exports
	in      *gateway.Ingress
	eg      *gateway.Egress
	// errc receives the error of a part that stopped.
	errc chan error
	// draining is set once the shutdown has begun.
	draining atomic.Bool
}

// run serves until a signal, then drains; it returns the exit code.
func (g *gatewayConfig) run() int {
	o := g.opts
	// The signal starts the shutdown; ctx, which everything runs under,
	// ends after the drain delay (the listeners close with it).
	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gateway")
	ctx, stopServing := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer stopServing()
	go g.certs.Watch(ctx, o.CertReloadInterval)

	prober := &gateway.Prober{
		Certs: g.certs, Peers: func() map[string]string { return o.Peers },
		Interval: o.ProbeInterval, Timeout: o.ProbeTimeout, FailureThreshold: o.ProbeFailureThreshold,
		OnChange: peerEvents(ctx, g.client, o.PodNamespace, o.PodName),
	}
	go prober.Run(ctx)

	p := &gatewayParts{errc: make(chan error, 3)}
	if g.ingress != nil {
		g.startIngress(ctx, p)
	}
	if o.Egress {
		p.eg = g.newEgress()
		go func() { p.errc <- p.eg.Run(ctx, g.client) }()
	}
	if g.metrics != nil {
		srv := serveHTTP(g.metrics, gatewayMux(prober, p))
		defer srv.Close()
		logger.Info("Serving metrics", "address", g.metrics.Addr().String())
	}
	logger.Info("Starting", "cluster", o.Cluster, "peers", len(o.Peers), "ingress", o.IngressAddress != "", "egress", o.Egress)
	select {
	case <-signalled.Done():
		return shutdown(logger, o.DrainDelay, o.ShutdownGrace, &p.draining, stopServing, p.errc, p.in, p.eg)
	case err := <-p.errc:
		logger.Error(cmp.Or(err, errors.New("stopped")), "Gateway failed")
		return 1
	}
}

// idleTimeout is --idle-timeout as Ingress and Egress take it: negative is
// none.
func (g *gatewayConfig) idleTimeout() time.Duration {
	return cmp.Or(g.opts.IdleTimeout, -1)
}

// startIngress runs the exported Services' watch and the ingress on its
// listener.
func (g *gatewayConfig) startIngress(ctx context.Context, p *gatewayParts) {
	o, logger := g.opts, klog.FromContext(ctx)
	p.exports = gateway.NewExports(g.client, g.parsed.ExportSelector)
	p.exports.SetPolicy(gateway.EndpointPolicy{Selectorless: o.AllowSelectorless, Deny: o.DenyCIDRs})
	p.in = g.newIngress(p.exports)
	go func() {
		if err := p.exports.Run(ctx); err != nil {
			p.errc <- err
		}
	}()
	go func() { p.errc <- p.in.Serve(ctx, g.ingress) }()
	logger.Info("Ingress listening", "address", g.ingress.Addr().String(), "identity", g.certs.Identity().String())
	if p.in.AllowClusters == nil {
		logger.Info("Ingress accepts the gateway of any cluster whose certificate chains to the trust root; name those that link to this one with --allow-cluster")
	} else {
		logger.Info("Ingress accepts the gateways of these clusters only", "clusters", slices.Sorted(maps.Keys(p.in.AllowClusters)))
	}
}

// newIngress is the ingress the flags describe, resolving through exports.
func (g *gatewayConfig) newIngress(exports *gateway.Exports) *gateway.Ingress {
	o := g.opts
	return &gateway.Ingress{Certs: g.certs, Resolver: exports, DialTimeout: o.DialTimeout,
		HandshakeTimeout: o.HandshakeTimeout, IdleTimeout: g.idleTimeout(), MaxConns: o.MaxConnections, MaxHeaderBytes: o.MaxHeaderBytes,
		AllowClusters: g.parsed.AllowClusters, MaxConnsPerPeer: max(o.MaxConnectionsPerPeer, 0)}
}

// newEgress is the egress the flags describe.
func (g *gatewayConfig) newEgress() *gateway.Egress {
	o := g.opts
	eg := &gateway.Egress{Certs: g.certs, Peers: gateway.StaticPeers(o.Peers), BindAddress: o.EgressBindAddress,
		DialTimeout: o.DialTimeout, IdleTimeout: g.idleTimeout(), MaxConns: o.MaxConnections, MaxConnsPerSource: o.MaxConnectionsPerSource}
	eg.Trust.Ports = g.parsed.EgressPorts
	if o.MaxConnectionsPerSource <= 0 {
		eg.MaxConnsPerSource = -1 // none
	}
	return eg
}

// gatewayMux serves /metrics, /peers, /healthz and /readyz.
func gatewayMux(prober *gateway.Prober, p *gatewayParts) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.Handle("/peers", prober)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case p.draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case p.exports != nil && !p.exports.HasSynced():
			http.Error(w, "ingress: exported Services not synced", http.StatusServiceUnavailable)
		case p.in != nil && !p.in.Accepting():
			http.Error(w, "ingress: not accepting connections", http.StatusServiceUnavailable)
		case p.eg != nil && !p.eg.Ready():
			http.Error(w, "egress: mirror Services not read yet, or an egress port not accepting connections", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	return mux
}

// shutdown ends the gateway on SIGTERM, losing no stream and cutting none
// silently:
//
//  1. /readyz fails at once, and for the drain delay the listeners still
//     accept, while the endpoints of the egress Service and the
//     LoadBalancer's backends are updated: a connection that still comes
//     in is served;
//  2. then the listeners close (stopServing), and the streams open may
//     finish within the grace;
//  3. those left are reset, at both ends: a stream cut so must not look
//     complete to its client, as one closed in order would.
func shutdown(logger klog.Logger, drainDelay, grace time.Duration, draining *atomic.Bool, stopServing func(),
	errc <-chan error, in *gateway.Ingress, eg *gateway.Egress) int {
	draining.Store(true)
	logger.Info("Shutting down: /readyz fails; still accepting connections for the drain delay", "drainDelay", drainDelay, "grace", grace)
	select {
	case <-time.After(drainDelay):
	case err := <-errc:
		if err != nil {
			logger.Error(err, "Gateway failed while draining")
		}
	}
	stopServing()
	active := func() int {
		n := 0
		if in != nil {
			n += in.Active()
		}
		if eg != nil {
			n += eg.Active()
		}
		return n
	}
	if n := active(); n > 0 {
		logger.Info("Draining", "connections", n, "grace", grace)
	}
	deadline := time.Now().Add(grace)
	for active() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	n := 0
	if in != nil {
		n += in.Abort()
	}
	if eg != nil {
		n += eg.Abort()
	}
	if n > 0 {
		logger.Info("Shutdown grace over; reset the connections left", "connections", n)
	}
	return 0
}

// newGatewayClient makes the local cluster's client (a fake one in tests).
var newGatewayClient = func(cfg *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) }

// peerEvents returns the prober's callback: an Event on this gateway's Pod
// when a peer's gateway goes down or comes back. Without a Pod name there
// is nothing to record Events on, and the log line stands alone.
func peerEvents(ctx context.Context, client kubernetes.Interface, ns, pod string) func(string, bool, string) {
	if pod == "" || ns == "" {
		return nil
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(ns)})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "mcmirror-gateway"})
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod}
	return func(cluster string, alive bool, msg string) {
		if alive {
			rec.Eventf(ref, corev1.EventTypeNormal, "PeerGatewayUp", "The gateway of cluster %s answers its probe again", cluster)
			return
		}
		rec.Eventf(ref, corev1.EventTypeWarning, "PeerGatewayDown", "The gateway of cluster %s does not answer its probe: %s", cluster, msg)
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

func init() {
	subcommands["gateway"] = func(args []string) int { return runGateway(args) }
}

// peerFlags collects the repeatable --peer NAME=HOST:PORT.
type peerFlags gateway.StaticPeers

func (p peerFlags) String() string { return fmt.Sprint(map[string]string(p)) }

func (p peerFlags) Set(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return fmt.Errorf("want NAME=HOST:PORT, got %q", v)
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("peer %s: want HOST:PORT, got %q", name, addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("peer %s: bad port %q", name, port)
	}
	if _, dup := p[name]; dup {
		return fmt.Errorf("peer %q given twice", name)
	}
	p[name] = addr
	return nil
}

// clusterFlags collects a repeatable flag of cluster names.
type clusterFlags map[string]bool

func (c clusterFlags) String() string { return fmt.Sprint(slices.Sorted(maps.Keys(c))) }

func (c clusterFlags) Set(v string) error {
	if err := labels.ValidateClusterName(v); err != nil {
		return err
	}
	if c[v] {
		return fmt.Errorf("cluster %q given twice", v)
	}
	c[v] = true
	return nil
}

// allowedClusters is the ingress's allow-list: the clusters named by
// --allow-cluster and by --peer, or nil (any cluster the trust root vouches
// for) when no --allow-cluster is given.
func allowedClusters(allow clusterFlags, peers peerFlags) map[string]bool {
	if len(allow) == 0 {
		return nil
	}
	out := map[string]bool{}
	for c := range allow {
		out[c] = true
	}
	for c := range peers {
		out[c] = true
	}
	return out
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

func runGateway(args []string) int {
	fs := flag.NewFlagSet("coredns-mc gateway", flag.ContinueOnError)
	peers := peerFlags{}
	var (
		kubeconfig     = fs.String("kubeconfig", "", "kubeconfig of the local cluster (default: in-cluster config)")
		kubeContext    = fs.String("context", "", "context in --kubeconfig (default: its current context)")
		cluster        = fs.String("cluster", "", "name of this cluster (required); the certificate must name it")
		certFile       = fs.String("tls-cert", "", "PEM certificate (chain) of this gateway, with its identity spiffe://TRUST-DOMAIN/cluster/NAME (required)")
		keyFile        = fs.String("tls-key", "", "PEM private key of --tls-cert (required)")
		caFile         = fs.String("tls-ca", "", "PEM trust root shared by every cluster's gateway (required)")
		trustDomain    = fs.String("trust-domain", trust.DefaultTrustDomain, "trust domain of gateway identities")
		certReload     = fs.Duration("cert-reload-interval", 10*time.Second, "how often the certificate, key and root files are checked for changes")
		ingressAddr    = fs.String("ingress-address", ":4143", "listen address of the ingress, the mTLS port peers connect to (empty: no ingress)")
		exportSelector = fs.String("export-selector", labels.DefaultExportSelector, "label selector of the Services this cluster exports, beside those a ServiceExport stamped (gateway mode ones are reachable)")
		egress         = fs.Bool("egress", true, "serve the egress ports recorded on the local mirror Services")
		egressBind     = fs.String("egress-bind-address", "", "address the egress ports are bound on (default: all)")
		metricsAddr    = fs.String("metrics-addr", ":9155", "address of /metrics, /healthz, /readyz and /peers (empty: off)")
		dialTimeout    = fs.Duration("dial-timeout", 5*time.Second, "bound on a dial: to the target (ingress), to the peer's ingress with handshake and answer (egress)")
		handshakeTO    = fs.Duration("handshake-timeout", 10*time.Second, "bound on an ingress client's TLS handshake and CONNECT request together")
		idleTimeout    = fs.Duration("idle-timeout", time.Hour, "an established stream with no traffic either way for this long is closed (0: never)")
		maxConns       = fs.Int("max-connections", 16384, "concurrent connections, each of ingress and egress; one more is reset")
		maxHeader      = fs.Int("max-header-bytes", 8192, "largest CONNECT request the ingress reads")
		probeInterval  = fs.Duration("probe-interval", 2*time.Second, "interval between probes of each peer's gateway")
		probeTimeout   = fs.Duration("probe-timeout", 2*time.Second, "bound on one probe")
		probeFailures  = fs.Int("probe-failure-threshold", 2, "failed probes in a row that mark a peer's gateway down")
		podName        = fs.String("pod-name", os.Getenv("POD_NAME"), "this gateway's Pod, which Events about peers are recorded on (default $POD_NAME; empty: no Events)")
		podNamespace   = fs.String("pod-namespace", os.Getenv("POD_NAMESPACE"), "namespace of --pod-name (default $POD_NAMESPACE)")
		drainDelay     = fs.Duration("drain-delay", 5*time.Second, "on SIGTERM, how long the listeners still accept, /readyz failing, while endpoints and load balancers take the pod out")
		drain          = fs.Duration("shutdown-grace", 20*time.Second, "on SIGTERM, how long open streams may go on after the listeners close; those left are then reset (keep --drain-delay plus this under the Pod's terminationGracePeriodSeconds)")
	)
	fs.Var(peers, "peer", "NAME=HOST:PORT: the ingress address of a linked cluster's gateway (repeatable)")
	trust := gateway.RegisterTrustFlags(fs)
	limits := gateway.RegisterLimitFlags(fs)
	allow := clusterFlags{}
	fs.Var(allow, "allow-cluster", "NAME: a cluster whose gateway may connect to the ingress (repeatable); once given, only these and the --peer clusters may, others are refused (cluster_not_allowed). Without it, any cluster whose certificate chains to --tls-ca may")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Func("v", "log verbosity (1: refusals and resets, 3: every tunnel)", func(s string) error { return klogFlags.Set("v", s) })
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "coredns-mc gateway: "+format+"\n", a...)
		return 2
	}
	// A mistake is one line; the flag list only when asked for.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "usage: coredns-mc gateway --cluster NAME --tls-cert FILE --tls-key FILE --tls-ca FILE [--peer NAME=HOST:PORT]... [flags]\n\n"+
				"The gateway between clusters: egress on the ports of the local mirror Services, ingress (mTLS) to this cluster's exported Services. See gateway/README.md.\n\nFlags:")
			fs.PrintDefaults()
			return 0
		}
		return fail("%v (-h lists the flags)", err)
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected arguments %q", fs.Args())
	case *cluster == "":
		return fail("--cluster is required")
	case *ingressAddr == "" && !*egress:
		return fail("neither ingress (--ingress-address) nor egress (--egress): nothing to do")
	case *idleTimeout < 0, *drain < 0, *drainDelay < 0, *dialTimeout <= 0, *handshakeTO <= 0, *probeInterval <= 0, *probeTimeout <= 0:
		return fail("timeouts and intervals must be positive")
	case *maxConns < 1, *maxHeader < 512, *probeFailures < 1:
		return fail("--max-connections and --probe-failure-threshold must be at least 1, --max-header-bytes at least 512")
	}
	if err := labels.ValidateClusterName(*cluster); err != nil {
		return fail("--cluster: %v", err)
	}
	gatewayGC()
	if _, ok := peers[*cluster]; ok {
		return fail("--peer %s: that is this cluster's name", *cluster)
	}
	if allow[*cluster] {
		return fail("--allow-cluster %s: that is this cluster's name", *cluster)
	}
	if len(allow) > 0 && *ingressAddr == "" {
		return fail("--allow-cluster is the ingress's allow-list, and there is no ingress (--ingress-address is empty)")
	}
	sel, err := k8slabels.Parse(*exportSelector)
	if err != nil || sel.Empty() {
		return fail("--export-selector %q: must select some Services (%v)", *exportSelector, err)
	}
	certs, err := gateway.LoadCerts(gateway.CertFiles{Cert: *certFile, Key: *keyFile, CA: *caFile, TrustDomain: *trustDomain})
	if err != nil {
		return fail("certificates: %v", err)
	}
	if certs.Cluster() != *cluster {
		return fail("--tls-cert names cluster %q, not --cluster %q", certs.Cluster(), *cluster)
	}
	var cfg *rest.Config
	if *kubeconfig != "" {
		cfg, err = link.LoadKubeconfig(*kubeconfig, *kubeContext)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fail("local cluster: %v", err)
	}
	client, err := newGatewayClient(cfg)
	if err != nil {
		return fail("local cluster: %v", err)
	}
	idle := *idleTimeout
	if idle == 0 {
		idle = -1 // Ingress and Egress: negative is none
	}

	// Listen before anything else, so that a taken port is a clear
	// start-up error.
	var ingressLn, metricsLn net.Listener
	if *ingressAddr != "" {
		if ingressLn, err = net.Listen("tcp", *ingressAddr); err != nil {
			return fail("--ingress-address: %v", err)
		}
	}
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			if ingressLn != nil {
				ingressLn.Close()
			}
			return fail("--metrics-addr: %v", err)
		}
	}

	// The signal starts the shutdown; ctx, which everything runs under,
	// ends after the drain delay (the listeners close with it).
	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("gateway")
	ctx, stopServing := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer stopServing()
	go certs.Watch(ctx, *certReload)

	prober := &gateway.Prober{
		Certs: certs, Peers: func() map[string]string { return peers },
		Interval: *probeInterval, Timeout: *probeTimeout, FailureThreshold: *probeFailures,
		OnChange: peerEvents(ctx, client, *podNamespace, *podName),
	}
	go prober.Run(ctx)

	var exports *gateway.Exports
	var in *gateway.Ingress
	var eg *gateway.Egress
	errc := make(chan error, 3)
	if ingressLn != nil {
		exports = gateway.NewExports(client, sel)
		trust.ConfigureIngress(exports)
		in = &gateway.Ingress{Certs: certs, Resolver: exports, DialTimeout: *dialTimeout,
			HandshakeTimeout: *handshakeTO, IdleTimeout: idle, MaxConns: *maxConns, MaxHeaderBytes: *maxHeader,
			AllowClusters: allowedClusters(allow, peers)}
		limits.ConfigureIngress(in)
		go func() {
			if err := exports.Run(ctx); err != nil {
				errc <- err
			}
		}()
		go func() { errc <- in.Serve(ctx, ingressLn) }()
		logger.Info("Ingress listening", "address", ingressLn.Addr().String(), "identity", certs.Identity().String())
		if in.AllowClusters == nil {
			logger.Info("Ingress accepts the gateway of any cluster whose certificate chains to the trust root; name those that link to this one with --allow-cluster")
		} else {
			logger.Info("Ingress accepts the gateways of these clusters only", "clusters", slices.Sorted(maps.Keys(in.AllowClusters)))
		}
	}
	if *egress {
		eg = &gateway.Egress{Certs: certs, Peers: gateway.StaticPeers(peers), BindAddress: *egressBind,
			DialTimeout: *dialTimeout, IdleTimeout: idle, MaxConns: *maxConns}
		trust.ConfigureEgress(eg)
		limits.ConfigureEgress(eg)
		go func() { errc <- eg.Run(ctx, client) }()
	}
	var draining atomic.Bool
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		mux.Handle("/peers", prober)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			switch {
			case draining.Load():
				http.Error(w, "shutting down", http.StatusServiceUnavailable)
			case exports != nil && !exports.HasSynced():
				http.Error(w, "ingress: exported Services not synced", http.StatusServiceUnavailable)
			case in != nil && !in.Accepting():
				http.Error(w, "ingress: not accepting connections", http.StatusServiceUnavailable)
			case eg != nil && !eg.Ready():
				http.Error(w, "egress: mirror Services not read yet, or an egress port not accepting connections", http.StatusServiceUnavailable)
			default:
				_, _ = w.Write([]byte("ok"))
			}
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(metricsLn) }()
		defer srv.Close()
		logger.Info("Serving metrics", "address", metricsLn.Addr().String())
	}
	logger.Info("Starting", "cluster", *cluster, "peers", len(peers), "ingress", *ingressAddr != "", "egress", *egress)
	select {
	case <-signalled.Done():
		return shutdown(logger, *drainDelay, *drain, &draining, stopServing, errc, in, eg)
	case err := <-errc:
		if err == nil {
			err = errors.New("stopped")
		}
		logger.Error(err, "Gateway failed")
		return 1
	}
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

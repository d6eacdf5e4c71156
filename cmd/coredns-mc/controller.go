package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/mcs"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// mcsState says in the start-up log whether the Multi-Cluster Services
// API is acted on, and if not, why.
func mcsState(enabled, served bool) string {
	switch {
	case !enabled:
		return "off (--mcs-api=false)"
	case !served:
		return "off (the ServiceExport and ServiceImport CRDs are not installed; restart after installing them)"
	}
	return "on"
}

func init() {
	subcommands["controller"] = func(args []string) int { return runController(args) }
}

// linkFlags collects the repeatable --link NAME=KUBECONFIG[:CONTEXT].
type linkFlags []link.Static

func (l *linkFlags) String() string { return fmt.Sprint(*l) }

func (l *linkFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("want NAME=KUBECONFIG[:CONTEXT], got %q", v)
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return err
	}
	s := link.Static{Name: name, Kubeconfig: rest}
	// A path that exists is a path, colons included; otherwise the text
	// after the last colon names a context.
	if _, err := os.Stat(rest); err != nil {
		if i := strings.LastIndex(rest, ":"); i > 0 {
			s.Kubeconfig, s.Context = rest[:i], rest[i+1:]
		}
	}
	for _, o := range *l {
		if o.Name == name {
			return fmt.Errorf("link %q given twice", name)
		}
	}
	*l = append(*l, s)
	return nil
}

func runController(args []string) int {
	fs := flag.NewFlagSet("coredns-mc controller", flag.ContinueOnError)
	var links linkFlags
	var (
		kubeconfig      = fs.String("kubeconfig", "", "kubeconfig of the local cluster (default: in-cluster config)")
		kubeContext     = fs.String("context", "", "context in --kubeconfig (default: its current context)")
		cluster         = fs.String("cluster", "", "name of this cluster (required)")
		linkSecrets     = fs.String("link-secrets", "", "NAMESPACE[/SELECTOR]: link the clusters of the Linkerd-format kubeconfig Secrets there")
		exportSelector  = fs.String("export-selector", labels.DefaultExportSelector, "label selector of the exported Services of linked clusters")
		egressAddress   = fs.String("egress-address", "", "fixed address of the local gateway egress the mirrors point at (not loopback; this or --egress-service)")
		egressService   = fs.String("egress-service", "", "NAMESPACE/NAME: the gateway's headless egress Service; the mirrors point at all of its ready addresses (this or --egress-address)")
		egressPorts     = fs.String("egress-ports", "", "FROM-TO: egress ports allocated to mirror ports (required)")
		createNS        = fs.Bool("create-namespaces", false, "create the namespace of an exported Service when it is missing locally")
		podGrace        = fs.Duration("pod-grace", 30*time.Second, "how long a per-pod mirror outlives its remote endpoint (rolling updates)")
		linkGrace       = fs.Duration("link-removal-grace", 10*time.Second, "how long the mirrors of a removed link are kept before they are deleted")
		headlessGrace   = fs.Duration("headless-grace", 10*time.Minute, "how long a headless mirror stays headless while its remote endpoints have no hostname")
		workers         = fs.Int("workers", 4, "concurrent syncs")
		leaderElect     = fs.Bool("leader-elect", false, "run only while holding a Lease, so that several replicas are safe")
		leaderNamespace = fs.String("leader-elect-namespace", "kube-system", "namespace of the leader election Lease")
		leaderName      = fs.String("leader-elect-name", "mcmirror-controller", "name of the leader election Lease")
		leaseDuration   = fs.Duration("leader-elect-lease-duration", 15*time.Second, "Lease duration")
		renewDeadline   = fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before giving up")
		retryPeriod     = fs.Duration("leader-elect-retry-period", 2*time.Second, "interval between Lease attempts")
		metricsAddr     = fs.String("metrics-addr", ":9154", "address of /metrics and /healthz (empty: off)")
		apiQPS          = fs.Float64("kube-api-qps", 50, "queries per second to the local API server (client-side limit)")
		apiBurst        = fs.Int("kube-api-burst", 100, "burst of queries to the local API server")
		mcsAPI          = fs.Bool("mcs-api", true, "act on the Multi-Cluster Services API (multicluster.x-k8s.io: export by ServiceExport, import as ServiceImport) when its CRDs are installed")
		seMode          = fs.String("service-export-mode", labels.ModeGateway, "mode of a ServiceExport without the "+labels.ModeLabel+" annotation: gateway or flat")
	)
	fs.Var(&links, "link", "NAME=KUBECONFIG[:CONTEXT]: link a cluster (repeatable)")
	var allow link.Allow
	fs.Func("allow-insecure-kubeconfig", "what the kubeconfigs of link Secrets may use, comma-separated: "+link.AllowValues()+" (default: none)",
		func(v string) error {
			for _, a := range strings.Split(v, ",") {
				if err := allow.Set(strings.TrimSpace(a)); err != nil {
					return err
				}
			}
			return nil
		})
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Func("v", "log verbosity", func(s string) error { return klogFlags.Set("v", s) })
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "coredns-mc controller: "+format+"\n", a...)
		return 2
	}
	// A mistake is one line; the flag list only when asked for.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "usage: coredns-mc controller --cluster NAME (--egress-address IP | --egress-service NAMESPACE/NAME) --egress-ports FROM-TO [flags]\n\n"+
				"The mirror controller: local mirror Services of the Services that linked clusters export. See controller/README.md.\n\nFlags:")
			fs.PrintDefaults()
			return 0
		}
		return fail("%v (-h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	if *cluster == "" {
		return fail("--cluster is required")
	}
	if err := labels.ValidateClusterName(*cluster); err != nil {
		return fail("--cluster: %v", err)
	}
	switch {
	case *workers < 1:
		return fail("--workers must be at least 1")
	case *podGrace < 0, *linkGrace < 0, *headlessGrace < 0:
		return fail("--pod-grace, --link-removal-grace and --headless-grace must not be negative")
	case *apiQPS <= 0, *apiBurst < 1:
		return fail("--kube-api-qps must be positive and --kube-api-burst at least 1")
	case *seMode != labels.ModeGateway && *seMode != labels.ModeFlat:
		return fail("--service-export-mode %q: want %s or %s", *seMode, labels.ModeGateway, labels.ModeFlat)
	case *leaderElect && (len(validation.IsDNS1123Label(*leaderNamespace)) > 0 || len(validation.IsDNS1123Subdomain(*leaderName)) > 0):
		return fail("--leader-elect-namespace %q or --leader-elect-name %q is not a valid name", *leaderNamespace, *leaderName)
	case *leaderElect && (*retryPeriod <= 0 || *leaseDuration <= *renewDeadline ||
		*renewDeadline <= time.Duration(leaderelection.JitterFactor*float64(*retryPeriod))):
		return fail("--leader-elect-lease-duration must exceed --leader-elect-renew-deadline, which must exceed %.1f × --leader-elect-retry-period, which must be positive", leaderelection.JitterFactor)
	}
	var egress netip.Addr
	var egressSvc types.NamespacedName
	var err error
	switch {
	case *egressAddress != "" && *egressService != "":
		return fail("--egress-address and --egress-service: give one")
	case *egressAddress != "":
		if egress, err = netip.ParseAddr(*egressAddress); err != nil {
			return fail("--egress-address: %v", err)
		}
		if egress.IsLoopback() || egress.IsUnspecified() || egress.IsLinkLocalUnicast() || egress.IsMulticast() {
			return fail("--egress-address %s: the API server refuses loopback, unspecified, link-local and multicast endpoint addresses", egress)
		}
	case *egressService != "":
		if egressSvc, err = controller.ParseEgressService(*egressService); err != nil {
			return fail("--egress-service: %v", err)
		}
	default:
		return fail("--egress-address or --egress-service is required")
	}
	ports, err := controller.ParsePortRange(*egressPorts)
	if err != nil {
		return fail("--egress-ports: %v", err)
	}
	sel, err := k8slabels.Parse(*exportSelector)
	if err != nil || sel.Empty() {
		return fail("--export-selector %q: must select some Services (%v)", *exportSelector, err)
	}
	var secretsNS string
	var secretsSel k8slabels.Selector
	if *linkSecrets != "" {
		ns, s, _ := strings.Cut(*linkSecrets, "/")
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fail("--link-secrets: bad namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		secretsNS = ns
		if s != "" {
			if secretsSel, err = k8slabels.Parse(s); err != nil {
				return fail("--link-secrets: bad selector %q: %v", s, err)
			}
		}
	}
	if allow != (link.Allow{}) && secretsNS == "" {
		return fail("--allow-insecure-kubeconfig without --link-secrets: it applies to link Secrets only")
	}
	for _, l := range links {
		if l.Name == *cluster {
			return fail("--link %s: that is this cluster's name", l.Name)
		}
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
	// client-go's default (5 QPS) would make every export wait for
	// the writes of the previous ones.
	cfg.QPS, cfg.Burst = float32(*apiQPS), *apiBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fail("local cluster: %v", err)
	}
	staticCfgs := make([]*rest.Config, len(links))
	for i, l := range links {
		if staticCfgs[i], err = l.Config(); err != nil {
			return fail("%v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("controller")
	ctx = klog.NewContext(ctx, logger)

	// watchdog fails /healthz when this replica leads but has not renewed
	// its Lease for a while, so that a liveness probe restarts a stuck
	// leader. Without leader election it always passes.
	watchdog := newLeaderWatchdog(healthzStale, *leaseDuration)

	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fail("--metrics-addr: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		logger.Info("Serving metrics", "address", ln.Addr().String())
	}

	// The cluster's ID in the clusterset, when the About API names one,
	// must be --cluster: both name it to the linked clusters.
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fail("local cluster: %v", err)
	}
	idCtx, cancelID := context.WithTimeout(ctx, 30*time.Second)
	_, err = mcs.ClusterID(idCtx, dyn, *cluster)
	cancelID()
	switch {
	case errors.Is(err, mcs.ErrClusterID):
		return fail("--cluster: %v", err)
	case apierrors.IsForbidden(err):
		// A role narrower than the chart's: the check is skipped, not
		// the controller.
		logger.Info("Cannot read the cluster ID; not checking it against --cluster", "err", err)
	case err != nil:
		fmt.Fprintf(os.Stderr, "coredns-mc controller: %v\n", err)
		return 1
	}
	var exportsClient mcsclient.Interface
	if *mcsAPI {
		served, err := mcs.Served(client.Discovery())
		if err != nil {
			fmt.Fprintf(os.Stderr, "coredns-mc controller: %v\n", err)
			return 1
		}
		if served {
			if exportsClient, err = mcsclient.NewForConfig(cfg); err != nil {
				return fail("local cluster: %v", err)
			}
		}
	}

	// run is the controller proper: links, then the sync loop.
	run := func(ctx context.Context) error {
		// Events go out from the start, before the link Secrets are
		// read: a refused Secret is told on its first sight.
		broadcaster := record.NewBroadcaster()
		broadcaster.StartStructuredLogging(3)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		var watcher *link.SecretWatcher
		opts := controller.Options{
			Recorder:         broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "mcmirror-controller"}),
			Cluster:          *cluster,
			Client:           client,
			ExportSelector:   sel,
			EgressAddress:    egress,
			EgressService:    egressSvc,
			EgressPorts:      ports,
			CreateNamespaces: *createNS,
			PodGrace:         *podGrace,
			LinkRemovalGrace: *linkGrace,
			HeadlessGrace:    *headlessGrace,
			Workers:          *workers,

			MCS:               exportsClient,
			ServiceExportMode: *seMode,
		}
		if secretsNS != "" {
			opts.LinksSynced = func() bool { return watcher != nil && watcher.HasSynced() }
		}
		ctrl, err := controller.New(opts)
		if err != nil {
			return err
		}
		reserved := []string{*cluster}
		for i, l := range links {
			ctrl.Add(l.Name, staticCfgs[i])
			reserved = append(reserved, l.Name)
		}
		if secretsNS != "" {
			w, err := link.NewSecretWatcher(client, ctrl, link.SecretWatcherOptions{
				Namespace: secretsNS,
				Selector:  secretsSel,
				Reserved:  reserved,
				Allow:     allow,
				Logf:      func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) },
				OnRefused: ctrl.LinkRefused,
			})
			if err != nil {
				return err
			}
			watcher = w
			go w.Run(ctx)
		}
		egressFrom := "address " + *egressAddress
		if *egressService != "" {
			egressFrom = "service " + egressSvc.String()
		}
		logger.Info("Starting", "cluster", *cluster, "links", len(links), "linkSecrets", *linkSecrets, "allowInsecureKubeconfig", allow.String(),
			"egress", egressFrom, "egressPorts", ports.String(), "exportSelector", sel.String(),
			"mcsAPI", mcsState(*mcsAPI, exportsClient != nil), "serviceExportMode", *seMode)
		return ctrl.Run(ctx)
	}

	if !*leaderElect {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Controller failed")
			return 1
		}
		return 0
	}

	// Renewals go through their own client, with its own rate limiter,
	// as kube-controller-manager's do: a burst of mirror writes must not
	// delay a renewal past the renew deadline.
	leClient, err := leaderElectionClient(cfg)
	if err != nil {
		return fail("leader election: %v", err)
	}
	host, _ := os.Hostname()
	code, err := runLeaderElected(ctx, leaderConfig{
		client:    leClient,
		namespace: *leaderNamespace, name: *leaderName,
		identity:      fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().UnixNano()),
		leaseDuration: *leaseDuration, renewDeadline: *renewDeadline, retryPeriod: *retryPeriod,
		watchdog: watchdog,
	}, run, logger)
	if err != nil {
		return fail("leader election: %v", err)
	}
	return code
}

// leaderElectionClient returns the client of the Lease: cfg's server and
// credentials, its own rate limiter, its own user agent.
func leaderElectionClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	c := rest.AddUserAgent(rest.CopyConfig(cfg), "mcmirror-controller-leader-election")
	c.RateLimiter = nil // a fresh one from QPS and Burst
	return kubernetes.NewForConfig(c)
}

// healthzStale is how long a leader may go without renewing its Lease
// before /healthz fails.
const healthzStale = 20 * time.Second

// newLeaderWatchdog returns the /healthz check of a leader: it fails when
// this replica leads but has not renewed its Lease for stale. client-go's
// HealthzAdaptor fails after the lease duration plus its timeout, so the
// timeout is stale minus the lease duration (none when the lease is longer:
// then it fails once the lease has expired).
func newLeaderWatchdog(stale, leaseDuration time.Duration) *leaderelection.HealthzAdaptor {
	return leaderelection.NewLeaderHealthzAdaptor(max(stale-leaseDuration, 0))
}

// leaderConfig is what runLeaderElected needs.
type leaderConfig struct {
	// client is used for the Lease only.
	client                                    kubernetes.Interface
	namespace, name, identity                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	watchdog                                  *leaderelection.HealthzAdaptor
}

// runLeaderElected runs run while this replica holds the Lease, and
// returns the exit status. When ctx ends (SIGTERM), run's context ends,
// its workers stop and are waited for, and only then is the Lease
// released: another replica never writes while this one's syncs still
// run. A lost Lease ends run too, and the status is 1.
func runLeaderElected(ctx context.Context, lc leaderConfig, run func(context.Context) error, logger klog.Logger) (int, error) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: lc.namespace, Name: lc.name},
		Client:     lc.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: lc.identity},
	}
	// leCtx ends the election: on a signal before leading, or once run
	// has returned.
	leCtx, leCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer leCancel()
	var code atomic.Int32
	var leading atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   lc.leaseDuration,
		RenewDeadline:   lc.renewDeadline,
		RetryPeriod:     lc.retryPeriod,
		ReleaseOnCancel: true,
		Name:            lc.name,
		WatchDog:        lc.watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				leading.Store(true)
				defer leCancel() // release the Lease only now
				logger.Info("Leading", "identity", lc.identity, "lease", lc.namespace+"/"+lc.name)
				// run stops on a signal or on a lost Lease.
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				stop := context.AfterFunc(lctx, rcancel)
				defer stop()
				if err := run(rctx); err != nil && ctx.Err() == nil && lctx.Err() == nil {
					logger.Error(err, "Controller failed")
					code.Store(1)
				}
				logger.Info("Controller stopped; releasing the lease", "identity", lc.identity)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					// Another replica may be writing now: stop at once.
					logger.Info("Lost the lease; exiting", "identity", lc.identity)
					code.Store(1)
				}
			},
			OnNewLeader: func(identity string) {
				if identity != lc.identity {
					logger.Info("Following", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return 0, err
	}
	if lc.watchdog != nil {
		lc.watchdog.SetLeaderElection(le)
	}
	// A signal while following ends the election; while leading, run
	// ends first and OnStartedLeading ends it.
	stop := context.AfterFunc(ctx, func() {
		if !leading.Load() {
			leCancel()
		}
	})
	defer stop()
	le.Run(leCtx)
	return int(code.Load()), nil
}

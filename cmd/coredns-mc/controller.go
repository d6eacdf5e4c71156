package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/mcs"
	"github.com/mcmirror/mcmirror/internal/options"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	subcommands["controller"] = runController
}

// controllerCmd is `coredns-mc controller`.
var controllerCmd = component{name: "controller",
	usage: "usage: coredns-mc controller --cluster NAME (--egress-address IP | --egress-service NAMESPACE/NAME) --egress-ports FROM-TO [flags]\n\n" +
		"The mirror controller: local mirror Services of the Services that linked clusters export. See controller/README.md."}

// runController runs the controller: options, then a checked
// configuration with its clients, then the controller until a signal.
func runController(args []string) int {
	o := options.NewController()
	if code, ok := controllerCmd.parse(args, o.AddFlags); !ok {
		return code
	}
	cfg, err := newControllerConfig(o)
	if err != nil {
		return controllerCmd.fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("controller"))
	if err := cfg.run(ctx); err != nil {
		return controllerCmd.fail(err)
	}
	return 0
}

// controllerConfig is what the controller runs with: its options, checked
// and parsed, and the clients of the local cluster and the linked ones.
type controllerConfig struct {
	opts   *options.Controller
	parsed options.CompletedController
	// rest and client reach the local cluster.
	rest   *rest.Config
	client *kubernetes.Clientset
	// static holds the client configuration of each --link, in order.
	static []*rest.Config
}

// newControllerConfig checks o and makes the clients it names; it
// contacts nothing.
func newControllerConfig(o *options.Controller) (*controllerConfig, error) {
	parsed, err := o.Complete()
	if err != nil {
		return nil, err
	}
	if err := o.Verbosity.Apply(); err != nil {
		return nil, fmt.Errorf("-v: %w", err)
	}
	cfg, err := localConfig(o.Kube)
	if err != nil {
		return nil, err
	}
	// client-go's default (5 QPS) would make every export wait for
	// the writes of the previous ones.
	cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	c := &controllerConfig{opts: o, parsed: parsed, rest: cfg, client: client, static: make([]*rest.Config, len(o.Links))}
	for i, l := range o.Links {
		if c.static[i], err = l.Config(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// run serves /metrics, checks the cluster's ID, and runs the controller,
// under leader election if asked, until ctx ends.
func (c *controllerConfig) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	// watchdog fails /healthz when this replica leads but has not renewed
	// its Lease for a while, so that a liveness probe restarts a stuck
	// leader. Without leader election it always passes.
	watchdog := newLeaderWatchdog(healthzStale, c.opts.LeaseDuration)
	if c.opts.MetricsAddress != "" {
		srv, err := serveControllerMetrics(logger, c.opts.MetricsAddress, watchdog)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if err := c.checkClusterID(ctx); err != nil {
		return err
	}
	mcsClient, err := c.mcsClient()
	if err != nil {
		return err
	}
	run := func(ctx context.Context) error { return c.runController(ctx, mcsClient) }
	if !c.opts.LeaderElect {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Controller failed")
			return exitError{code: 1}
		}
		return nil
	}
	return c.runLeaderElected(ctx, watchdog, run)
}

// serveControllerMetrics serves /metrics and /healthz on addr.
func serveControllerMetrics(logger klog.Logger, addr string, watchdog *leaderelection.HealthzAdaptor) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
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
	logger.Info("Serving metrics", "address", ln.Addr().String())
	return serveHTTP(ln, mux), nil
}

// checkClusterID checks that the cluster's ID in the clusterset, when the
// About API names one, is --cluster: both name it to the linked clusters.
func (c *controllerConfig) checkClusterID(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(c.rest)
	if err != nil {
		return fmt.Errorf("local cluster: %w", err)
	}
	idCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = mcs.ClusterID(idCtx, dyn, c.opts.Cluster)
	switch {
	case errors.Is(err, mcs.ErrClusterID):
		return fmt.Errorf("--cluster: %w", err)
	case apierrors.IsForbidden(err):
		// A role narrower than the chart's: the check is skipped, not
		// the controller.
		klog.FromContext(ctx).Info("Cannot read the cluster ID; not checking it against --cluster", "err", err)
	case err != nil:
		return exitError{1, err}
	}
	return nil
}

// mcsClient returns the client of the Multi-Cluster Services API, or nil
// when it is off or not served.
func (c *controllerConfig) mcsClient() (mcsclient.Interface, error) {
	if !c.opts.MCSAPI {
		return nil, nil
	}
	served, err := mcs.Served(c.client.Discovery())
	if err != nil {
		return nil, exitError{1, err}
	}
	if !served {
		return nil, nil
	}
	client, err := mcsclient.NewForConfig(c.rest)
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	return client, nil
}

// runController is the controller proper: links, then the sync loop.
func (c *controllerConfig) runController(ctx context.Context, mcsClient mcsclient.Interface) error {
	// Events go out from the start, before the link Secrets are read: a
	// refused Secret is told on its first sight.
	broadcaster := record.NewBroadcaster()
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	var watcher *link.SecretWatcher
	opts := c.controllerOptions(broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "mcmirror-controller"}), mcsClient)
	if c.parsed.LinkSecretsNamespace != "" {
		opts.LinksSynced = func() bool { return watcher != nil && watcher.HasSynced() }
	}
	ctrl, err := controller.New(opts)
	if err != nil {
		return err
	}
	for i, l := range c.opts.Links {
		ctrl.Add(l.Name, c.static[i])
	}
	if c.parsed.LinkSecretsNamespace != "" {
		if watcher, err = c.watchLinkSecrets(ctx, ctrl); err != nil {
			return err
		}
	}
	c.logStart(klog.FromContext(ctx), mcsClient != nil)
	return ctrl.Run(ctx)
}

// controllerOptions are the controller package's options from the flags.
func (c *controllerConfig) controllerOptions(rec record.EventRecorder, mcsClient mcsclient.Interface) controller.Options {
	o := c.opts
	return controller.Options{
		Recorder:         rec,
		Cluster:          o.Cluster,
		Client:           c.client,
		ExportSelector:   c.parsed.ExportSelector,
		EgressAddress:    c.parsed.EgressAddress,
		EgressService:    c.parsed.EgressService,
		EgressPorts:      c.parsed.EgressPorts,
		CreateNamespaces: o.CreateNamespaces,
		PodGrace:         o.PodGrace,
		LinkRemovalGrace: o.LinkRemovalGrace,
		HeadlessGrace:    o.HeadlessGrace,
		Workers:          o.Workers,
		FlatEndpoints:    o.MirrorFlatEndpoints,

		MCS:                mcsClient,
		ServiceExportMode:  o.ServiceExportMode,
		EndpointPolicy:     endpointpolicy.Policy{Selectorless: o.AllowSelectorless, Deny: o.DenyCIDRs},
		MaxImportEndpoints: o.MaxImportEndpoints,
		LinkStartupTimeout: o.LinkStartupTimeout,
	}
}

// watchLinkSecrets starts the watch of the link Secrets, which links and
// unlinks their clusters; this cluster's and the --link names are
// reserved.
func (c *controllerConfig) watchLinkSecrets(ctx context.Context, ctrl *controller.Controller) (*link.SecretWatcher, error) {
	logger := klog.FromContext(ctx)
	reserved := []string{c.opts.Cluster}
	for _, l := range c.opts.Links {
		reserved = append(reserved, l.Name)
	}
	w, err := link.NewSecretWatcher(c.client, ctrl, link.SecretWatcherOptions{
		Namespace: c.parsed.LinkSecretsNamespace,
		Selector:  c.parsed.LinkSecretsSelector,
		Reserved:  reserved,
		Allow:     c.opts.AllowInsecureKubeconfig,
		Logf:      func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) },
		OnRefused: ctrl.LinkRefused,
	})
	if err != nil {
		return nil, err
	}
	go w.Run(ctx)
	return w, nil
}

// logStart says what the controller starts with.
func (c *controllerConfig) logStart(logger klog.Logger, mcsServed bool) {
	o, p := c.opts, c.parsed
	egressFrom := "address " + o.EgressAddress
	if o.EgressService != "" {
		egressFrom = "service " + p.EgressService.String()
	}
	logger.Info("Starting", "cluster", o.Cluster, "links", len(o.Links), "linkSecrets", o.LinkSecrets, "allowInsecureKubeconfig", o.AllowInsecureKubeconfig.String(),
		"egress", egressFrom, "egressPorts", p.EgressPorts.String(), "exportSelector", p.ExportSelector.String(),
		"mcsAPI", mcsState(o.MCSAPI, mcsServed), "serviceExportMode", o.ServiceExportMode)
}

// runLeaderElected runs run while this replica holds the Lease.
func (c *controllerConfig) runLeaderElected(ctx context.Context, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	// Renewals go through their own client, with its own rate limiter,
	// as kube-controller-manager's do: a burst of mirror writes must not
	// delay a renewal past the renew deadline.
	leClient, err := leaderElectionClient(c.rest)
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	host, _ := os.Hostname()
	o := c.opts
	code, err := runLeaderElected(ctx, leaderConfig{
		client:    leClient,
		namespace: o.LeaseNamespace, name: o.LeaseName,
		identity:      fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().UnixNano()),
		leaseDuration: o.LeaseDuration, renewDeadline: o.RenewDeadline, retryPeriod: o.RetryPeriod,
		watchdog: watchdog,
	}, run, klog.FromContext(ctx))
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if code != 0 {
		return exitError{code: code} // logged
	}
	return nil
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

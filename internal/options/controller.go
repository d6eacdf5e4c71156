package options

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// Controller is the configuration of `coredns-mc controller`, one field a
// flag (controller/README.md).
type Controller struct {
	Kube
	Verbosity

	// Cluster is this cluster's name.
	Cluster string
	// Links are the clusters linked by a kubeconfig file (--link).
	Links Links
	// LinkAllowedNamespaces and LinkDeniedNamespaces narrow Links to
	// some namespaces of their clusters.
	LinkAllowedNamespaces, LinkDeniedNamespaces LinkNamespaces
	// LinkSecrets is NAMESPACE[/SELECTOR] of the link Secrets; empty: none.
	LinkSecrets string
	// AllowInsecureKubeconfig is what the link Secrets' kubeconfigs may use.
	AllowInsecureKubeconfig link.Allow
	// ExportSelector selects the exported Services of linked clusters.
	ExportSelector string
	// EgressAddress or EgressService is where the mirrors point; one of them.
	EgressAddress, EgressService string
	// EgressPorts is FROM-TO, the range egress ports are allocated from.
	EgressPorts string
	// CreateNamespaces creates the namespace of an export that lacks one.
	CreateNamespaces bool
	// PodGrace, LinkRemovalGrace and HeadlessGrace are how long mirrors
	// outlive what they mirror.
	PodGrace, LinkRemovalGrace, HeadlessGrace time.Duration
	// Workers is the number of concurrent syncs.
	Workers int
	// LeaderElect runs the controller only while it holds the Lease
	// LeaseNamespace/LeaseName.
	LeaderElect               bool
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsAddress serves /metrics and /healthz; empty: off.
	MetricsAddress string
	// KubeAPIQPS and KubeAPIBurst bound the local API server's queries.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// MCSAPI acts on ServiceExport and ServiceImport when they are served.
	MCSAPI bool
	// ServiceExportMode is the mode of a ServiceExport that names none.
	ServiceExportMode string
	// EndpointPolicy is which endpoints of a linked cluster's flat-mode
	// export an import carries.
	EndpointPolicy
	// MaxImportEndpoints bounds the endpoints one ServiceImport carries.
	MaxImportEndpoints int
	// LinkStartupTimeout bounds how long the imports that a link shares
	// in wait for its first sync.
	LinkStartupTimeout time.Duration
	// MirrorFlatEndpoints writes the flat-mode mirrors' EndpointSlices,
	// copies of the remote endpoints, which DNS in import mode answers
	// from (the plugin's `source import`).
	MirrorFlatEndpoints bool
}

// NewController returns the controller's defaults.
func NewController() *Controller {
	return &Controller{
		ExportSelector:    labels.DefaultExportSelector,
		PodGrace:          30 * time.Second,
		LinkRemovalGrace:  10 * time.Second,
		HeadlessGrace:     10 * time.Minute,
		Workers:           4,
		LeaseNamespace:    "kube-system",
		LeaseName:         "mcmirror-controller",
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		MetricsAddress:    ":9154",
		KubeAPIQPS:        50,
		KubeAPIBurst:      100,
		MCSAPI:            true,
		ServiceExportMode: labels.ModeGateway,
		// Kubernetes' scalability threshold for the backends of one
		// Service.
		MaxImportEndpoints: 5000,
		LinkStartupTimeout: 30 * time.Second,
	}
}

// AddFlags adds the controller's flags to fs, with o's values as defaults.
func (o *Controller) AddFlags(fs *flag.FlagSet) {
	o.Kube.addFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", o.Cluster, "name of this cluster (required)")
	fs.StringVar(&o.LinkSecrets, "link-secrets", o.LinkSecrets, "NAMESPACE[/SELECTOR]: link the clusters of the Linkerd-format kubeconfig Secrets there")
	fs.StringVar(&o.ExportSelector, "export-selector", o.ExportSelector, "label selector of the exported Services of linked clusters")
	fs.StringVar(&o.EgressAddress, "egress-address", o.EgressAddress, "fixed address of the local gateway egress the mirrors point at (not loopback; this or --egress-service)")
	fs.StringVar(&o.EgressService, "egress-service", o.EgressService, "NAMESPACE/NAME: the gateway's headless egress Service; the mirrors point at all of its ready addresses (this or --egress-address)")
	fs.StringVar(&o.EgressPorts, "egress-ports", o.EgressPorts, "FROM-TO: egress ports allocated to mirror ports (required)")
	fs.BoolVar(&o.CreateNamespaces, "create-namespaces", o.CreateNamespaces, "create the namespace of an exported Service when it is missing locally")
	fs.DurationVar(&o.PodGrace, "pod-grace", o.PodGrace, "how long a per-pod mirror outlives its remote endpoint (rolling updates)")
	fs.DurationVar(&o.LinkRemovalGrace, "link-removal-grace", o.LinkRemovalGrace, "how long the mirrors of a removed link are kept before they are deleted")
	fs.DurationVar(&o.HeadlessGrace, "headless-grace", o.HeadlessGrace, "how long a headless mirror stays headless while its remote endpoints have no hostname")
	fs.IntVar(&o.Workers, "workers", o.Workers, "concurrent syncs")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run only while holding a Lease, so that several replicas are safe")
	fs.StringVar(&o.LeaseNamespace, "leader-elect-namespace", o.LeaseNamespace, "namespace of the leader election Lease")
	fs.StringVar(&o.LeaseName, "leader-elect-name", o.LeaseName, "name of the leader election Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "Lease duration")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader tries to renew before giving up")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "interval between Lease attempts")
	fs.StringVar(&o.MetricsAddress, "metrics-addr", o.MetricsAddress, "address of /metrics and /healthz (empty: off)")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the local API server (client-side limit)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the local API server")
	fs.BoolVar(&o.MCSAPI, "mcs-api", o.MCSAPI, "act on the Multi-Cluster Services API (multicluster.x-k8s.io: export by ServiceExport, import as ServiceImport) when its CRDs are installed")
	fs.StringVar(&o.ServiceExportMode, "service-export-mode", o.ServiceExportMode, "mode of a ServiceExport without the "+labels.ModeLabel+" annotation: gateway or flat")
	o.EndpointPolicy.addFlags(fs, "a flat-mode import carries", "no import carries")
	fs.IntVar(&o.MaxImportEndpoints, "max-import-endpoints", o.MaxImportEndpoints, "endpoints one ServiceImport carries at most, shared fairly among the exporting clusters; the rest are left out, with an Event")
	fs.DurationVar(&o.LinkStartupTimeout, "link-startup-timeout", o.LinkStartupTimeout, "how long the imports a link takes part in wait for its first sync; then they go on, keeping its part as last seen")
	fs.BoolVar(&o.MirrorFlatEndpoints, "mirror-flat-endpoints", o.MirrorFlatEndpoints, "also give flat-mode mirrors EndpointSlices that copy the remote endpoints, for DNS in import mode (source import)")
	fs.Var(&o.Links, "link", "NAME=KUBECONFIG[:CONTEXT]: link a cluster (repeatable)")
	fs.Var(&o.LinkAllowedNamespaces, linkNamespacesFlags[0], "NAME=NAMESPACE[,NAMESPACE...]: the --link NAME brings these namespaces only (repeatable, one per link)")
	fs.Var(&o.LinkDeniedNamespaces, linkNamespacesFlags[1], "NAME=NAMESPACE[,NAMESPACE...]: the --link NAME brings nothing of these namespaces (repeatable, one per link)")
	fs.Func("allow-insecure-kubeconfig", "what the kubeconfigs of link Secrets may use, comma-separated: "+link.AllowValues()+" (default: none)",
		func(v string) error {
			for _, a := range strings.Split(v, ",") {
				if err := o.AllowInsecureKubeconfig.Set(strings.TrimSpace(a)); err != nil {
					return err
				}
			}
			return nil
		})
	o.Verbosity.addFlag(fs, "log verbosity")
}

// LinkSecretsNamespace is the namespace of --link-secrets, or "".
func (o *Controller) LinkSecretsNamespace() string {
	ns, _, _ := strings.Cut(o.LinkSecrets, "/")
	return ns
}

// CompletedController is a valid Controller's values in the types the
// controller takes.
type CompletedController struct {
	ExportSelector k8slabels.Selector
	// EgressAddress or EgressService is set, not both.
	EgressAddress netip.Addr
	EgressService types.NamespacedName
	EgressPorts   labels.PortRange
	// LinkSecretsNamespace is empty without --link-secrets;
	// LinkSecretsSelector is nil when it names no selector.
	LinkSecretsNamespace string
	LinkSecretsSelector  k8slabels.Selector
	// Links are the --link links, with their namespaces.
	Links []link.Static
}

// Complete returns o's values parsed, or its first mistake in the words the
// controller exits with.
func (o *Controller) Complete() (CompletedController, error) {
	var c CompletedController
	if err := o.validateScalars(); err != nil {
		return c, err
	}
	var err error
	if c.EgressAddress, c.EgressService, err = o.egress(); err != nil {
		return c, err
	}
	if c.EgressPorts, err = labels.ParsePortRange(o.EgressPorts); err != nil {
		return c, fmt.Errorf("--egress-ports: %v", err)
	}
	if c.ExportSelector, err = exportSelector(o.ExportSelector); err != nil {
		return c, err
	}
	if c.LinkSecretsNamespace, c.LinkSecretsSelector, err = o.linkSecrets(); err != nil {
		return c, err
	}
	if o.AllowInsecureKubeconfig != (link.Allow{}) && c.LinkSecretsNamespace == "" {
		return c, errors.New("--allow-insecure-kubeconfig without --link-secrets: it applies to link Secrets only")
	}
	for _, l := range o.Links {
		if l.Name == o.Cluster {
			return c, fmt.Errorf("--link %s: that is this cluster's name", l.Name)
		}
	}
	c.Links, err = narrowLinks(o.Links, &o.LinkAllowedNamespaces, &o.LinkDeniedNamespaces)
	return c, err
}

// validateScalars checks the flags that stand alone.
func (o *Controller) validateScalars() error {
	if err := validateCluster(o.Cluster); err != nil {
		return err
	}
	switch {
	case o.Workers < 1:
		return errors.New("--workers must be at least 1")
	case o.PodGrace < 0, o.LinkRemovalGrace < 0, o.HeadlessGrace < 0:
		return errors.New("--pod-grace, --link-removal-grace and --headless-grace must not be negative")
	case o.MaxImportEndpoints < 1:
		return errors.New("--max-import-endpoints must be at least 1")
	case o.LinkStartupTimeout < 0:
		return errors.New("--link-startup-timeout must not be negative")
	case o.KubeAPIQPS <= 0, o.KubeAPIBurst < 1:
		return errors.New("--kube-api-qps must be positive and --kube-api-burst at least 1")
	case o.ServiceExportMode != labels.ModeGateway && o.ServiceExportMode != labels.ModeFlat:
		return fmt.Errorf("--service-export-mode %q: want %s or %s", o.ServiceExportMode, labels.ModeGateway, labels.ModeFlat)
	case o.LeaderElect && (len(validation.IsDNS1123Label(o.LeaseNamespace)) > 0 || len(validation.IsDNS1123Subdomain(o.LeaseName)) > 0):
		return fmt.Errorf("--leader-elect-namespace %q or --leader-elect-name %q is not a valid name", o.LeaseNamespace, o.LeaseName)
	case o.LeaderElect && (o.RetryPeriod <= 0 || o.LeaseDuration <= o.RenewDeadline ||
		o.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(o.RetryPeriod))):
		return fmt.Errorf("--leader-elect-lease-duration must exceed --leader-elect-renew-deadline, which must exceed %.1f × --leader-elect-retry-period, which must be positive", leaderelection.JitterFactor)
	}
	return nil
}

// egress parses --egress-address or --egress-service, whichever is given.
func (o *Controller) egress() (netip.Addr, types.NamespacedName, error) {
	switch {
	case o.EgressAddress != "" && o.EgressService != "":
		return netip.Addr{}, types.NamespacedName{}, errors.New("--egress-address and --egress-service: give one")
	case o.EgressAddress != "":
		a, err := netip.ParseAddr(o.EgressAddress)
		if err != nil {
			return a, types.NamespacedName{}, fmt.Errorf("--egress-address: %v", err)
		}
		if a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast() {
			return a, types.NamespacedName{}, fmt.Errorf("--egress-address %s: the API server refuses loopback, unspecified, link-local and multicast endpoint addresses", a)
		}
		return a, types.NamespacedName{}, nil
	case o.EgressService != "":
		n, err := ParseEgressService(o.EgressService)
		if err != nil {
			return netip.Addr{}, n, fmt.Errorf("--egress-service: %v", err)
		}
		return netip.Addr{}, n, nil
	}
	return netip.Addr{}, types.NamespacedName{}, errors.New("--egress-address or --egress-service is required")
}

// linkSecrets parses --link-secrets NAMESPACE[/SELECTOR].
func (o *Controller) linkSecrets() (string, k8slabels.Selector, error) {
	if o.LinkSecrets == "" {
		return "", nil, nil
	}
	ns, s, _ := strings.Cut(o.LinkSecrets, "/")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", nil, fmt.Errorf("--link-secrets: bad namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	if s == "" {
		return ns, nil, nil
	}
	sel, err := k8slabels.Parse(s)
	if err != nil {
		return "", nil, fmt.Errorf("--link-secrets: bad selector %q: %v", s, err)
	}
	return ns, sel, nil
}

// ParseEgressService parses NAMESPACE/NAME, the local Service whose ready
// endpoints are the gateway egress addresses.
func ParseEgressService(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("bad Service %q: want NAMESPACE/NAME", s)
	}
	n := types.NamespacedName{Namespace: ns, Name: name}
	return n, ValidateEgressService(n)
}

// ValidateEgressService checks the names of the egress Service.
func ValidateEgressService(n types.NamespacedName) error {
	if errs := validation.IsDNS1123Label(n.Namespace); len(errs) > 0 {
		return fmt.Errorf("bad namespace %q: %s", n.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1035Label(n.Name); len(errs) > 0 {
		return fmt.Errorf("bad Service name %q: %s", n.Name, strings.Join(errs, "; "))
	}
	return nil
}

// Links collects the repeatable --link NAME=KUBECONFIG[:CONTEXT].
type Links []link.Static

func (l *Links) String() string { return fmt.Sprint(*l) }

// Set adds one link.
func (l *Links) Set(v string) error {
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
	if slices.ContainsFunc(*l, func(o link.Static) bool { return o.Name == name }) {
		return fmt.Errorf("link %q given twice", name)
	}
	*l = append(*l, s)
	return nil
}

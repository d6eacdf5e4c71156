package options

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/trust"

	k8slabels "k8s.io/apimachinery/pkg/labels"
)

// Gateway is the configuration of `coredns-mc gateway`, one field a flag
// (gateway/README.md).
type Gateway struct {
	Kube
	Verbosity

	// Cluster is this cluster's name; the certificate must name it.
	Cluster string
	// CertFile, KeyFile and CAFile are the PEM files of the gateway's
	// certificate, its key and the trust root (paths in the pod).
	CertFile, KeyFile, CAFile string
	// TrustDomain of the gateway identities.
	TrustDomain string
	// CertReloadInterval is how often the files are checked for changes.
	CertReloadInterval time.Duration
	// IngressAddress is the ingress's listen address; empty: no ingress.
	IngressAddress string
	// ExportSelector selects the Services this cluster exports.
	ExportSelector string
	// Egress serves the egress ports of the mirror Services.
	Egress bool
	// EgressBindAddress is where the egress ports are bound; empty: all.
	EgressBindAddress string
	// MetricsAddress serves /metrics, /healthz, /readyz and /peers; empty:
	// off.
	MetricsAddress string
	// DialTimeout, HandshakeTimeout and IdleTimeout bound a stream's
	// stages; IdleTimeout 0 is none.
	DialTimeout, HandshakeTimeout, IdleTimeout time.Duration
	// MaxConnections bounds ingress and egress each; MaxHeaderBytes the
	// CONNECT request.
	MaxConnections, MaxHeaderBytes int
	// ProbeInterval, ProbeTimeout and ProbeFailureThreshold time the
	// probes of the peers' gateways.
	ProbeInterval, ProbeTimeout time.Duration
	ProbeFailureThreshold       int
	// PodName and PodNamespace are the Pod that Events about peers go on.
	PodName, PodNamespace string
	// DrainDelay and ShutdownGrace time the shutdown.
	DrainDelay, ShutdownGrace time.Duration
	// Peers maps each --peer cluster to its gateway's ingress address;
	// PeerOrder lists them as given.
	Peers     map[string]string
	PeerOrder []string
	// AllowClusters are the --allow-cluster names, as given.
	AllowClusters []string

	// What the gateway believes (gateway/README.md, "Trust").

	// EgressPorts is the controller's --egress-ports; empty: any port.
	EgressPorts string
	// EndpointPolicy is what the ingress dials.
	EndpointPolicy

	// What one source may hold (gateway/README.md, "Abuse").

	// BufferBudget is the bytes of grown copy buffers; 0: the default.
	BufferBudget int64
	// MaxConnectionsPerSource and MaxConnectionsPerPeer bound one client
	// address (egress) and one peer cluster (ingress); 0: no bound.
	MaxConnectionsPerSource, MaxConnectionsPerPeer int
}

// NewGateway returns the gateway's defaults.
func NewGateway() *Gateway {
	return &Gateway{
		TrustDomain:             trust.DefaultTrustDomain,
		CertReloadInterval:      10 * time.Second,
		IngressAddress:          ":4143",
		ExportSelector:          labels.DefaultExportSelector,
		Egress:                  true,
		MetricsAddress:          ":9155",
		DialTimeout:             5 * time.Second,
		HandshakeTimeout:        10 * time.Second,
		IdleTimeout:             time.Hour,
		MaxConnections:          16384,
		MaxHeaderBytes:          8192,
		ProbeInterval:           2 * time.Second,
		ProbeTimeout:            2 * time.Second,
		ProbeFailureThreshold:   2,
		PodName:                 os.Getenv("POD_NAME"),
		PodNamespace:            os.Getenv("POD_NAMESPACE"),
		DrainDelay:              5 * time.Second,
		ShutdownGrace:           20 * time.Second,
		Peers:                   map[string]string{},
		MaxConnectionsPerSource: 1024,
	}
}

// AddFlags adds the gateway's flags to fs, with o's values as defaults.
func (o *Gateway) AddFlags(fs *flag.FlagSet) {
	o.Kube.addFlags(fs)
	fs.StringVar(&o.Cluster, "cluster", o.Cluster, "name of this cluster (required); the certificate must name it")
	fs.StringVar(&o.CertFile, "tls-cert", o.CertFile, "PEM certificate (chain) of this gateway, with its identity spiffe://TRUST-DOMAIN/cluster/NAME (required)")
	fs.StringVar(&o.KeyFile, "tls-key", o.KeyFile, "PEM private key of --tls-cert (required)")
	fs.StringVar(&o.CAFile, "tls-ca", o.CAFile, "PEM trust root shared by every cluster's gateway (required)")
	fs.StringVar(&o.TrustDomain, "trust-domain", o.TrustDomain, "trust domain of gateway identities")
	fs.DurationVar(&o.CertReloadInterval, "cert-reload-interval", o.CertReloadInterval, "how often the certificate, key and root files are checked for changes")
	fs.StringVar(&o.IngressAddress, "ingress-address", o.IngressAddress, "listen address of the ingress, the mTLS port peers connect to (empty: no ingress)")
	fs.StringVar(&o.ExportSelector, "export-selector", o.ExportSelector, "label selector of the Services this cluster exports, beside those a ServiceExport stamped (gateway mode ones are reachable)")
	fs.BoolVar(&o.Egress, "egress", o.Egress, "serve the egress ports recorded on the local mirror Services")
	fs.StringVar(&o.EgressBindAddress, "egress-bind-address", o.EgressBindAddress, "address the egress ports are bound on (default: all)")
	fs.StringVar(&o.MetricsAddress, "metrics-addr", o.MetricsAddress, "address of /metrics, /healthz, /readyz and /peers (empty: off)")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "bound on a dial: to the target (ingress), to the peer's ingress with handshake and answer (egress)")
	fs.DurationVar(&o.HandshakeTimeout, "handshake-timeout", o.HandshakeTimeout, "bound on an ingress client's TLS handshake and CONNECT request together")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "an established stream with no traffic either way for this long is closed (0: never)")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "concurrent connections, each of ingress and egress; one more is reset")
	fs.IntVar(&o.MaxHeaderBytes, "max-header-bytes", o.MaxHeaderBytes, "largest CONNECT request the ingress reads")
	fs.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval, "interval between probes of each peer's gateway")
	fs.DurationVar(&o.ProbeTimeout, "probe-timeout", o.ProbeTimeout, "bound on one probe")
	fs.IntVar(&o.ProbeFailureThreshold, "probe-failure-threshold", o.ProbeFailureThreshold, "failed probes in a row that mark a peer's gateway down")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "this gateway's Pod, which Events about peers are recorded on (default $POD_NAME; empty: no Events)")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "namespace of --pod-name (default $POD_NAMESPACE)")
	fs.DurationVar(&o.DrainDelay, "drain-delay", o.DrainDelay, "on SIGTERM, how long the listeners still accept, /readyz failing, while endpoints and load balancers take the pod out")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace, "on SIGTERM, how long open streams may go on after the listeners close; those left are then reset (keep --drain-delay plus this under the Pod's terminationGracePeriodSeconds)")
	fs.Func("peer", "NAME=HOST:PORT: the ingress address of a linked cluster's gateway (repeatable)", o.addPeer)
	fs.Func("allow-cluster", "NAME: a cluster whose gateway may connect to the ingress (repeatable); once given, only these and the --peer clusters may, others are refused (cluster_not_allowed). Without it, any cluster whose certificate chains to --tls-ca may", o.addAllowCluster)
	o.addTrustFlags(fs)
	o.addLimitFlags(fs)
	o.Verbosity.addFlag(fs, "log verbosity (1: refusals and resets, 3: every tunnel)")
}

// addTrustFlags adds the flags of what the gateway believes.
func (o *Gateway) addTrustFlags(fs *flag.FlagSet) {
	fs.Func("egress-ports", "FROM-TO: the controller's --egress-ports; the egress ignores claims on ports outside it (default: any port)", func(s string) error {
		if _, err := labels.ParsePortRange(s); err != nil {
			return err
		}
		o.EgressPorts = s
		return nil
	})
	o.EndpointPolicy.addFlags(fs, "the ingress dials", "the ingress never dials")
}

// addLimitFlags adds the flags of what one source may hold.
func (o *Gateway) addLimitFlags(fs *flag.FlagSet) {
	fs.Func("buffer-budget", "bytes of grown copy buffers (16 KB, 256 KB) all streams may hold; over it a stream copies with 1 KB buffers (default: a quarter of the container's memory limit, cgroup v2 memory.max or v1 memory.limit_in_bytes, else 256 MiB)", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1<<20 {
			return fmt.Errorf("want a number of bytes, at least 1048576")
		}
		o.BufferBudget = n
		return nil
	})
	fs.IntVar(&o.MaxConnectionsPerSource, "max-connections-per-source", o.MaxConnectionsPerSource, "concurrent egress connections of one client address; one more is reset (0: no bound but --max-connections)")
	fs.IntVar(&o.MaxConnectionsPerPeer, "max-connections-per-peer", o.MaxConnectionsPerPeer, "concurrent ingress streams of one peer cluster; one more is answered 503 (0: no bound but --max-connections)")
}

// addPeer is --peer NAME=HOST:PORT.
func (o *Gateway) addPeer(v string) error {
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
	if _, dup := o.Peers[name]; dup {
		return fmt.Errorf("peer %q given twice", name)
	}
	if o.Peers == nil {
		o.Peers = map[string]string{}
	}
	o.Peers[name] = addr
	o.PeerOrder = append(o.PeerOrder, name)
	return nil
}

// addAllowCluster is --allow-cluster NAME.
func (o *Gateway) addAllowCluster(v string) error {
	if err := labels.ValidateClusterName(v); err != nil {
		return err
	}
	if slices.Contains(o.AllowClusters, v) {
		return fmt.Errorf("cluster %q given twice", v)
	}
	o.AllowClusters = append(o.AllowClusters, v)
	return nil
}

// CompletedGateway is a valid Gateway's values in the types the gateway
// takes.
type CompletedGateway struct {
	ExportSelector k8slabels.Selector
	// EgressPorts is the zero range without --egress-ports: any port.
	EgressPorts labels.PortRange
	// AllowClusters is the ingress's allow-list, nil for any cluster.
	AllowClusters map[string]bool
}

// Complete returns o's values parsed, or its first mistake in the words the
// gateway exits with.
func (o *Gateway) Complete() (CompletedGateway, error) {
	var c CompletedGateway
	switch {
	case o.Cluster == "":
		return c, errors.New("--cluster is required")
	case o.IngressAddress == "" && !o.Egress:
		return c, errors.New("neither ingress (--ingress-address) nor egress (--egress): nothing to do")
	case o.IdleTimeout < 0, o.ShutdownGrace < 0, o.DrainDelay < 0, o.DialTimeout <= 0, o.HandshakeTimeout <= 0, o.ProbeInterval <= 0, o.ProbeTimeout <= 0:
		return c, errors.New("timeouts and intervals must be positive")
	case o.MaxConnections < 1, o.MaxHeaderBytes < 512, o.ProbeFailureThreshold < 1:
		return c, errors.New("--max-connections and --probe-failure-threshold must be at least 1, --max-header-bytes at least 512")
	}
	if err := labels.ValidateClusterName(o.Cluster); err != nil {
		return c, fmt.Errorf("--cluster: %v", err)
	}
	switch {
	case o.Peers[o.Cluster] != "":
		return c, fmt.Errorf("--peer %s: that is this cluster's name", o.Cluster)
	case slices.Contains(o.AllowClusters, o.Cluster):
		return c, fmt.Errorf("--allow-cluster %s: that is this cluster's name", o.Cluster)
	case len(o.AllowClusters) > 0 && o.IngressAddress == "":
		return c, errors.New("--allow-cluster is the ingress's allow-list, and there is no ingress (--ingress-address is empty)")
	}
	var err error
	if c.ExportSelector, err = exportSelector(o.ExportSelector); err != nil {
		return c, err
	}
	c.EgressPorts, _ = labels.ParsePortRange(o.EgressPorts) // checked as parsed, or empty
	c.AllowClusters = o.allowedClusters()
	return c, nil
}

// allowedClusters is the ingress's allow-list: the clusters named by
// --allow-cluster and by --peer, or nil (any cluster the trust root vouches
// for) when no --allow-cluster is given.
func (o *Gateway) allowedClusters() map[string]bool {
	if len(o.AllowClusters) == 0 {
		return nil
	}
	out := map[string]bool{}
	for _, c := range o.AllowClusters {
		out[c] = true
	}
	for c := range o.Peers {
		out[c] = true
	}
	return out
}

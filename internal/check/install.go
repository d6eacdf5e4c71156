package check

import (
	"cmp"
	"flag"
	"io"
	"path"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/options"

	"github.com/coredns/caddy/caddyfile"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
)

// Names of the objects mcmirror is installed as: those of deploy/*.yaml,
// which the Helm chart keeps.
const (
	Namespace             = "mcmirror"
	ControllerName        = "mcmirror-controller"
	GatewayName           = "mcmirror-gateway"
	GatewayMetricsService = "mcmirror-gateway-metrics"
	LinkServiceAccount    = "mcmirror-link"
	DefaultLinkNamespace  = "mcmirror-links"
	DNSNamespace          = "kube-system"
	DNSName               = "coredns"
	// DNSPodSelector selects the cluster DNS pods (kubeadm's label, which
	// the kube-dns Service selects).
	DNSPodSelector = "k8s-app=kube-dns"
)

// Workload is what check reads of one Deployment of mcmirror: where it
// runs as, and with which flags.
type Workload struct {
	// Namespace and Name of the Deployment.
	Namespace, Name string
	// Found is false when the Deployment does not exist.
	Found bool
	// Err is why it could not be read (forbidden, unreachable), if so.
	Err string
	// Replicas wanted.
	Replicas int32
	// ServiceAccount its pods run as.
	ServiceAccount string
	// Image, Args and Env of its first container: coredns-mc's.
	Image string
	Args  []string
	Env   map[string]bool
	// HostNetwork is set when its pods share their node's network.
	HostNetwork bool
	// Mounts maps a container mount path to the volume mounted there.
	Mounts map[string]corev1.Volume
}

// WorkloadOf reads a Deployment.
func WorkloadOf(d *appsv1.Deployment) Workload {
	w := Workload{Namespace: d.Namespace, Name: d.Name, Found: true, Replicas: 1, Env: map[string]bool{}, Mounts: map[string]corev1.Volume{}}
	if d.Spec.Replicas != nil {
		w.Replicas = *d.Spec.Replicas
	}
	spec := d.Spec.Template.Spec
	w.ServiceAccount = cmp.Or(spec.ServiceAccountName, "default")
	w.HostNetwork = spec.HostNetwork
	if len(spec.Containers) == 0 {
		return w
	}
	c := spec.Containers[0]
	w.Image = c.Image
	w.Args = append(append([]string(nil), c.Command[min(1, len(c.Command)):]...), c.Args...)
	for _, e := range c.Env {
		w.Env[e.Name] = true
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if v, ok := vols[m.Name]; ok {
			w.Mounts[m.MountPath] = v
		}
	}
	return w
}

// Install is mcmirror as installed in the cluster checked.
type Install struct {
	Controller, Gateway, DNS Workload
	// Corefile of the cluster DNS, from the ConfigMap its Deployment mounts;
	// CorefileFrom names that ConfigMap, CorefileErr says why it could not
	// be read.
	Corefile, CorefileFrom, CorefileErr string
	// LinkServiceAccount is whether mcmirror/mcmirror-link exists: other
	// clusters link this one with its tokens (deploy/remote-link.yaml).
	LinkServiceAccount bool
	// LinkServiceAccountErr is why that could not be read.
	LinkServiceAccountErr string
}

// ControllerConfig is the controller's configuration as its Deployment's
// arguments give it: the controller's own options.
type ControllerConfig = options.Controller

// ParseController reads the controller's arguments with the controller's
// own flags and defaults.
func ParseController(args []string) ControllerConfig {
	o := options.NewController()
	parseArgs(o.AddFlags, args)
	return *o
}

// GatewayConfig is the gateway's configuration as its Deployment's
// arguments give it: the gateway's own options.
type GatewayConfig = options.Gateway

// ParseGateway reads the gateway's arguments with the gateway's own flags
// and defaults.
func ParseGateway(args []string) GatewayConfig {
	o := options.NewGateway()
	parseArgs(o.AddFlags, args)
	return *o
}

// parseArgs parses a Deployment's arguments, the subcommand first, with
// the flags addFlags adds, as the component does. Unlike the component it
// reads on past a mistake (a flag of a newer version, a bad value), so as
// to see every flag it knows: the component itself reports the mistake
// when it starts.
func parseArgs(addFlags func(*flag.FlagSet), args []string) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addFlags(fs)
	for len(args) > 0 {
		err := fs.Parse(args)
		rest := fs.Args()
		if err == nil || len(rest) == len(args) {
			// Parsing stopped at an argument that is not a flag (the
			// subcommand, or the value of a flag this version lacks),
			// or at one it could not step over: pass it.
			rest = rest[min(1, len(rest)):]
		}
		args = rest
	}
}

// CASecret returns the Secret and key that the gateway's --tls-ca file
// comes from, by the volume mounted over its directory.
func (w Workload) CASecret(caFile string) (secret, key string, ok bool) {
	v, file, found := w.mounted(caFile)
	if !found || v.Secret == nil {
		return "", "", false
	}
	return v.Secret.SecretName, projectedKey(file, v.Secret.Items), true
}

// mounted returns the volume mounted over the directory of file, a path
// in the container, and the file's name in that directory.
func (w Workload) mounted(file string) (v corev1.Volume, name string, ok bool) {
	if file == "" {
		return corev1.Volume{}, "", false
	}
	dir, name := path.Split(file)
	v, ok = w.Mounts[strings.TrimSuffix(dir, "/")]
	if !ok {
		v, ok = w.Mounts[dir]
	}
	return v, name, ok
}

// projectedKey is the key of a Secret or ConfigMap volume that appears as
// the file name: the key an item projects to that path, or the name itself.
func projectedKey(name string, items []corev1.KeyToPath) string {
	for _, it := range items {
		if it.Path == name {
			return it.Key
		}
	}
	return name
}

// DNSConfig is the mcmirror block of the cluster DNS's Corefile.
type DNSConfig struct {
	// Mcmirror is whether the Corefile has an mcmirror block at all.
	Mcmirror bool
	// Zones of the block; the first one not reverse is the cluster domain.
	Zones         []string
	Cluster       string
	LinkNamespace string
	// Import is import mode (source import): the DNS reads the linked
	// clusters from the controller's mirrors.
	Import bool
	Allow  link.Allow
	// Kubernetes is whether the kubernetes plugin is configured too.
	Kubernetes bool
	// KubernetesSelectsCopies is whether the kubernetes plugin of the
	// mcmirror block's server selects the controller's flat-mode copies
	// of the linked clusters' endpoints (no labels that leave out
	// labels.FlatEndpoints): in import mode it then holds each mirrored
	// endpoint a second time.
	KubernetesSelectsCopies bool
	// Metrics is the address of the prometheus plugin, where the
	// replicas' link states are (the mcmirror block's, or else the first
	// one: the metrics are the process's); "" when there is none.
	Metrics string
}

// Domain returns the cluster domain mcmirror answers in: its first zone
// that is not a reverse one, or cluster.local.
func (d DNSConfig) Domain() string {
	for _, z := range d.Zones {
		z = strings.TrimSuffix(z, ".")
		if z != "" && !strings.HasSuffix(z, "in-addr.arpa") && !strings.HasSuffix(z, "ip6.arpa") {
			return z
		}
	}
	return "cluster.local"
}

// ParseCorefile finds the mcmirror block of a Corefile, read by CoreDNS's
// own parser; a Corefile that does not parse has none.
func ParseCorefile(corefile string) DNSConfig {
	d, _ := parseCorefile(corefile)
	return d
}

// parseCorefile reads what check needs of a Corefile: the mcmirror block,
// its properties as the plugin reads them, and whether the kubernetes
// plugin is configured too.
func parseCorefile(corefile string) (DNSConfig, error) {
	var d DNSConfig
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(corefile), nil)
	if err != nil {
		return d, err
	}
	for _, b := range blocks {
		if len(b.Tokens["kubernetes"]) > 0 {
			d.Kubernetes = true
		}
		if addr, ok := prometheusAddr(b.Tokens["prometheus"]); ok && (d.Metrics == "" || len(b.Tokens["mcmirror"]) > 0) {
			d.Metrics = addr
		}
		if len(b.Tokens["mcmirror"]) > 0 && len(b.Tokens["kubernetes"]) > 0 {
			d.KubernetesSelectsCopies = selectsCopies(b.Tokens["kubernetes"])
		}
		c := caddyfile.NewDispenserTokens("Corefile", b.Tokens["mcmirror"])
		for c.Next() {
			d.Mcmirror = true
			d.Zones = c.RemainingArgs()
			for c.NextBlock() {
				prop, args := c.Val(), c.RemainingArgs()
				switch {
				case prop == "cluster" && len(args) > 0:
					d.Cluster = args[0]
				case prop == "source" && len(args) > 0:
					d.Import = args[0] == "import"
				case prop == "link_secrets" && len(args) > 0:
					d.LinkNamespace, _, _ = strings.Cut(args[0], "/")
				case prop == "allow_insecure_kubeconfig":
					for _, a := range args {
						_ = d.Allow.Set(a)
					}
				}
			}
		}
	}
	return d, nil
}

// flatCopy is the labels of a copy the controller writes of a linked
// cluster's EndpointSlice (--mirror-flat-endpoints), as a selector sees
// them.
var flatCopy = k8slabels.Set{labels.MirroredService: labels.MirroredServiceValue, labels.FlatEndpoints: "true",
	corev1.IsHeadlessService: "", labels.ManagedBy: labels.ManagedByValue}

// selectsCopies reports whether a kubernetes directive (its tokens)
// selects the controller's flat-mode copies: it has no labels option, or
// one whose selector (its arguments joined, as the plugin joins them)
// matches a copy.
func selectsCopies(tokens []caddyfile.Token) bool {
	c := caddyfile.NewDispenserTokens("Corefile", tokens)
	for c.Next() {
		c.RemainingArgs()
		for c.NextBlock() {
			if prop, args := c.Val(), c.RemainingArgs(); prop == "labels" && len(args) > 0 {
				sel, err := k8slabels.Parse(strings.Join(args, " "))
				return err != nil || sel.Matches(flatCopy)
			}
		}
	}
	return true
}

// prometheusAddr reads the address of a prometheus directive: its
// argument, or the plugin's default, localhost:9153.
func prometheusAddr(tokens []caddyfile.Token) (string, bool) {
	c := caddyfile.NewDispenserTokens("Corefile", tokens)
	if !c.Next() {
		return "", false
	}
	if args := c.RemainingArgs(); len(args) > 0 {
		return args[0], true
	}
	return "localhost:9153", true
}

package check

import (
	"path"
	"strings"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/trust"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	w.ServiceAccount = spec.ServiceAccountName
	if w.ServiceAccount == "" {
		w.ServiceAccount = "default"
	}
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

// flags holds the values of a command line's flags by name, the last one
// last; a flag given without a value holds "true".
type flags map[string][]string

// boolFlags are the flags of coredns-mc's subcommands that take no value.
var boolFlags = map[string]bool{"leader-elect": true, "create-namespaces": true, "egress": true}

// parseFlags reads args as Go's flag package does: -name, --name,
// -name=value, and -name value for flags that take a value.
func parseFlags(args []string) flags {
	out := flags{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // the subcommand, or a stray argument
		}
		name := strings.TrimLeft(a, "-")
		if n, v, ok := strings.Cut(name, "="); ok {
			out[n] = append(out[n], v)
			continue
		}
		if boolFlags[name] || i+1 == len(args) {
			out[name] = append(out[name], "true")
			continue
		}
		i++
		out[name] = append(out[name], args[i])
	}
	return out
}

// last returns the value of the flag as the program sees it: the last one
// given, or def.
func (f flags) last(name, def string) string {
	if v := f[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// on reports whether a boolean flag is set.
func (f flags) on(name string) bool {
	v := f.last(name, "false")
	return v == "true" || v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "True"
}

// ControllerConfig is the controller's configuration, from its flags
// (cmd/coredns-mc/controller.go).
type ControllerConfig struct {
	Cluster string
	// LinkNamespace is the namespace of --link-secrets; empty without it.
	LinkNamespace string
	// EgressPorts is --egress-ports as written.
	EgressPorts string
	// EgressService and EgressAddress are where the mirrors point.
	EgressService, EgressAddress string
	// LeaderElect and the Lease it takes.
	LeaderElect               bool
	LeaseNamespace, LeaseName string
	CreateNamespaces          bool
	// Allow is --allow-insecure-kubeconfig: what link Secrets may use.
	Allow    link.Allow
	AllowErr string
	// StaticLinks are the --link names: clusters linked by a file.
	StaticLinks []string
}

// ParseController reads the controller's arguments, with its defaults.
func ParseController(args []string) ControllerConfig {
	f := parseFlags(args)
	c := ControllerConfig{
		Cluster:          f.last("cluster", ""),
		EgressPorts:      f.last("egress-ports", ""),
		EgressService:    f.last("egress-service", ""),
		EgressAddress:    f.last("egress-address", ""),
		LeaderElect:      f.on("leader-elect"),
		LeaseNamespace:   f.last("leader-elect-namespace", "kube-system"),
		LeaseName:        f.last("leader-elect-name", "mcmirror-controller"),
		CreateNamespaces: f.on("create-namespaces"),
	}
	if ls := f.last("link-secrets", ""); ls != "" {
		c.LinkNamespace, _, _ = strings.Cut(ls, "/")
	}
	for _, v := range f["allow-insecure-kubeconfig"] {
		for a := range strings.SplitSeq(v, ",") {
			if err := c.Allow.Set(strings.TrimSpace(a)); err != nil {
				c.AllowErr = err.Error()
			}
		}
	}
	for _, l := range f["link"] {
		name, _, _ := strings.Cut(l, "=")
		c.StaticLinks = append(c.StaticLinks, name)
	}
	return c
}

// GatewayConfig is the gateway's configuration, from its flags
// (cmd/coredns-mc/gateway.go).
type GatewayConfig struct {
	Cluster string
	// Peers maps each --peer cluster to its ingress address; PeerOrder
	// lists them as given.
	Peers     map[string]string
	PeerOrder []string
	// AllowClusters are the --allow-cluster names.
	AllowClusters []string
	// EgressPorts is --egress-ports as written; empty: any port.
	EgressPorts string
	// Egress is whether the egress runs (--egress, on by default).
	Egress bool
	// IngressAddress and MetricsAddress are the listen addresses.
	IngressAddress, MetricsAddress string
	// TrustDomain of the identities.
	TrustDomain string
	// CAFile is --tls-ca, the trust root's path in the pod.
	CAFile string
}

// ParseGateway reads the gateway's arguments, with its defaults.
func ParseGateway(args []string) GatewayConfig {
	f := parseFlags(args)
	g := GatewayConfig{
		Cluster:        f.last("cluster", ""),
		Peers:          map[string]string{},
		AllowClusters:  f["allow-cluster"],
		EgressPorts:    f.last("egress-ports", ""),
		Egress:         f.last("egress", "true") != "false",
		IngressAddress: f.last("ingress-address", ":4143"),
		MetricsAddress: f.last("metrics-addr", ":9155"),
		TrustDomain:    f.last("trust-domain", trust.DefaultTrustDomain),
		CAFile:         f.last("tls-ca", ""),
	}
	for _, p := range f["peer"] {
		name, addr, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			continue
		}
		if _, dup := g.Peers[name]; !dup {
			g.PeerOrder = append(g.PeerOrder, name)
		}
		g.Peers[name] = addr
	}
	return g
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
	Allow         link.Allow
	// Kubernetes is whether the kubernetes plugin is configured too.
	Kubernetes bool
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

// ParseCorefile finds the mcmirror block of a Corefile. It reads only what
// check needs, line by line, as CoreDNS lays a directive out: a name, its
// arguments, and an optional block of one property a line.
func ParseCorefile(corefile string) DNSConfig {
	var d DNSConfig
	depth := 0
	inBlock := -1 // the depth of the mcmirror block's properties, or -1
	for _, raw := range strings.Split(corefile, "\n") {
		line := raw
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		opens := strings.Count(line, "{")
		closes := strings.Count(line, "}")
		if len(fields) > 0 && fields[len(fields)-1] == "{" {
			fields = fields[:len(fields)-1]
		}
		if len(fields) > 0 {
			switch {
			case inBlock >= 0 && depth == inBlock:
				switch fields[0] {
				case "cluster":
					if len(fields) > 1 {
						d.Cluster = fields[1]
					}
				case "link_secrets":
					if len(fields) > 1 {
						d.LinkNamespace, _, _ = strings.Cut(fields[1], "/")
					}
				case "allow_insecure_kubeconfig":
					for _, a := range fields[1:] {
						_ = d.Allow.Set(a)
					}
				}
			case fields[0] == "mcmirror" && depth == 1:
				d.Mcmirror = true
				d.Zones = append([]string(nil), fields[1:]...)
				if opens > closes {
					inBlock = depth + 1
				}
			case fields[0] == "kubernetes" && depth == 1:
				d.Kubernetes = true
			}
		}
		depth += opens - closes
		if inBlock >= 0 && depth < inBlock {
			inBlock = -1
		}
	}
	return d
}

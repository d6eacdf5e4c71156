package mcmirror

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/miekg/dns"

	corev1 "k8s.io/api/core/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const pluginName = "mcmirror"

var log = clog.NewWithPlugin(pluginName)

func init() { plugin.Register(pluginName, setup) }

// defaultStaleMaxAge is the stale_max_age of the Corefile: an hour covers a
// control-plane upgrade or outage, and bounds how long a cluster that is
// gone for good keeps its names.
const defaultStaleMaxAge = time.Hour

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	cfg.healthResolver = healthResolver(cfg, dnsserver.GetConfig(c))
	m, err := cfg.build()
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	c.OnStartup(m.Start)
	c.OnShutdown(m.Stop)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		m.Next = next
		return m
	})
	return nil
}

// config is a parsed mcmirror stanza. Nothing is read from disk or the
// network while parsing, so that a Corefile can be checked anywhere; build
// does that.
type config struct {
	zones          []string
	cluster        string
	kubeconfig     string // local cluster; in-cluster config when empty
	context        string
	kubeconfigAt   string // file:line of the kubeconfig property, for errors
	links          []link.Static
	linksAt        []string // file:line of each link
	secrets        bool
	secretsNS      string
	secretsSel     k8slabels.Selector // nil: every link Secret
	allow          link.Allow         // allow_insecure_kubeconfig: what link Secrets' kubeconfigs may use
	allowAt        string             // file:line of allow_insecure_kubeconfig; empty without it
	exportSel      k8slabels.Selector
	ttl            uint32
	startupTimeout time.Duration
	staleMaxAge    time.Duration // stale_max_age; 0: forever
	fall           fall.F
	healthURL      string // gateway_health; empty without it
	healthResolver string // where gateway_health's host is looked up; empty: the system
	healthInterval time.Duration
	allowed        allowedCIDRs   // allowed_cidrs, by linked cluster
	clusterset     []string       // clusterset: the zones of the MCS names; none without it
	namespaces     linkNamespaces // allowed_namespaces and denied_namespaces, by static link
	imports        bool           // source import
	sourceAt       string         // file:line of source; empty without it
}

// defaultClusterSetZone is the zone of clusterset without one: the
// Multi-Cluster Services API's, which its DNS specification requires.
const defaultClusterSetZone = "clusterset.local."

// props are the properties of a stanza: how many arguments each takes
// (max -1: any number), and whether it may be given more than once.
var props = map[string]struct {
	min, max int
	repeat   bool
}{
	"cluster":                   {1, 1, false},
	"kubeconfig":                {1, 2, false},
	"link":                      {2, 3, true}, // once per name
	"link_secrets":              {1, -1, false},
	"export_selector":           {1, -1, false},
	"ttl":                       {1, 1, false},
	"startup_timeout":           {1, 1, false},
	"stale_max_age":             {1, 1, false},
	"fallthrough":               {0, -1, false},
	"allow_insecure_kubeconfig": {1, -1, false},
	"gateway_health":            {1, 2, false},
	"allowed_cidrs":             {2, -1, true}, // once per cluster
	"clusterset":                {0, -1, false},
	"source":                    {1, 1, false},
	"allowed_namespaces":        {2, -1, true}, // once per cluster
	"denied_namespaces":         {2, -1, true},
}

func parse(c *caddy.Controller) (*config, error) {
	var (
		cfg *config
		err error
	)
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return nil, c.Errf("%v", plugin.ErrOnce) // with the file and line
		}
		if cfg, err = parseStanza(c); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func parseStanza(c *caddy.Controller) (*config, error) {
	cfg := &config{ttl: 5, startupTimeout: defaultStartupTimeout, staleMaxAge: defaultStaleMaxAge}
	cfg.zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys)
	if !slices.ContainsFunc(cfg.zones, func(z string) bool { return !isReverse(z) }) {
		return nil, c.Errf("non-reverse zone name must be used")
	}
	if err := checkZones(cfg.zones); err != nil {
		return nil, c.Errf("%v", err)
	}

	seen := map[string]bool{} // properties given, for the ones that may not repeat
	for c.NextBlock() {
		prop := c.Val()
		p, ok := props[prop]
		if !ok {
			return nil, c.Errf("unknown property '%s'", prop)
		}
		args := c.RemainingArgs()
		if len(args) < p.min || p.max >= 0 && len(args) > p.max {
			return nil, c.ArgErr()
		}
		if seen[prop] && !p.repeat {
			return nil, c.Errf("%s given twice", prop)
		}
		switch prop {
		case "cluster":
			if err := labels.ValidateClusterName(args[0]); err != nil {
				return nil, c.Errf("%v", err)
			}
			cfg.cluster = args[0]

		case "kubeconfig":
			cfg.kubeconfig = args[0]
			if len(args) == 2 {
				cfg.context = args[1]
			}
			cfg.kubeconfigAt = where(c)

		case "link":
			if err := labels.ValidateClusterName(args[0]); err != nil {
				return nil, c.Errf("link: %v", err)
			}
			if slices.ContainsFunc(cfg.links, func(l link.Static) bool { return l.Name == args[0] }) {
				return nil, c.Errf("link %q given twice", args[0])
			}
			l := link.Static{Name: args[0], Kubeconfig: args[1]}
			if len(args) == 3 {
				l.Context = args[2]
			}
			cfg.links = append(cfg.links, l)
			cfg.linksAt = append(cfg.linksAt, where(c))

		case "link_secrets":
			if errs := validation.IsDNS1123Label(args[0]); len(errs) > 0 {
				return nil, c.Errf("link_secrets: bad namespace %q: %s", args[0], strings.Join(errs, "; "))
			}
			cfg.secrets, cfg.secretsNS = true, args[0]
			if len(args) > 1 {
				sel, err := k8slabels.Parse(strings.Join(args[1:], " "))
				if err != nil {
					return nil, c.Errf("link_secrets: bad selector %q: %v", strings.Join(args[1:], " "), err)
				}
				cfg.secretsSel = sel
			}

		case "export_selector":
			s := strings.Join(args, " ")
			sel, err := k8slabels.Parse(s)
			if err != nil {
				return nil, c.Errf("export_selector: bad selector %q: %v", s, err)
			}
			if sel.Empty() {
				return nil, c.Errf("export_selector: %q selects every Service", s)
			}
			cfg.exportSel = sel

		case "ttl":
			t, err := strconv.Atoi(args[0])
			if err != nil {
				return nil, c.Errf("ttl: %q is not a number of seconds", args[0])
			}
			if t < 0 || t > 3600 {
				return nil, c.Errf("ttl must be in range [0, 3600]: %d", t)
			}
			cfg.ttl = uint32(t)

		case "startup_timeout":
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return nil, c.Errf("startup_timeout: %v", err)
			}
			if d <= 0 {
				return nil, c.Errf("startup_timeout must be positive: %s", args[0])
			}
			cfg.startupTimeout = d

		case "stale_max_age":
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return nil, c.Errf("stale_max_age: %v", err)
			}
			if d < 0 {
				return nil, c.Errf("stale_max_age must not be negative: %s", args[0])
			}
			cfg.staleMaxAge = d

		case "fallthrough":
			cfg.fall.SetZonesFromArgs(args)

		case "allow_insecure_kubeconfig":
			for _, a := range args {
				if err := cfg.allow.Set(a); err != nil {
					return nil, c.Errf("allow_insecure_kubeconfig: %v", err)
				}
			}
			cfg.allowAt = where(c)

		case "gateway_health":
			if err := parseGatewayHealth(c, cfg, args); err != nil {
				return nil, err
			}

		case "allowed_cidrs":
			if err := parseAllowedCIDRs(c, cfg, args); err != nil {
				return nil, err
			}

		case "clusterset":
			if err := parseClusterSet(c, cfg, args); err != nil {
				return nil, err
			}

		case "source":
			switch args[0] {
			case "direct":
			case "import":
				cfg.imports = true
			default:
				return nil, c.Errf("source: %q is neither direct (watch every linked cluster) nor import (read the mirrors the controller writes in this cluster)", args[0])
			}
			cfg.sourceAt = where(c)

		case "allowed_namespaces", "denied_namespaces":
			if err := parseLinkNamespaces(c, cfg, prop, args); err != nil {
				return nil, err
			}
		}
		seen[prop] = true
	}

	if cfg.cluster == "" {
		return nil, c.Errf("no cluster: this cluster's name is required")
	}
	for i, l := range cfg.links {
		if l.Name == cfg.cluster {
			return nil, fmt.Errorf("%s - Error during parsing: link %q has this cluster's name", cfg.linksAt[i], l.Name)
		}
	}
	if cfg.imports && (len(cfg.links) > 0 || cfg.secrets) {
		return nil, fmt.Errorf("%s - Error during parsing: source import with link or link_secrets: in import mode no linked cluster is watched here, the controller watches them; remove the links, or use source direct", cfg.sourceAt)
	}
	if cfg.allowAt != "" && !cfg.secrets {
		return nil, fmt.Errorf("%s - Error during parsing: allow_insecure_kubeconfig without link_secrets: it applies to link Secrets only", cfg.allowAt)
	}
	if err := cfg.checkAllowedCIDRs(); err != nil {
		return nil, err
	}
	if err := cfg.setLinkNamespaces(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkZones refuses the root zone: mcmirror answers in the cluster domain,
// and the root would make every name of the Internet look like one of its
// own, and "." the zone PTR records point into.
func checkZones(zones []string) error {
	for _, z := range zones {
		if z == "." {
			return errors.New(`zone "." is not a cluster domain: name it, as in "mcmirror cluster.local"`)
		}
		if _, ok := dns.IsDomainName(z); !ok {
			return fmt.Errorf("zone %q is not a domain name", z)
		}
	}
	return nil
}

// healthResolver returns where gateway_health's host is looked up: this
// server itself (on loopback, at its port, or at its first bind address)
// when the host is a name in one of the plugin's zones, such as
// mcmirror-gateway-metrics.mcmirror.svc.cluster.local, which the node's
// resolver a DNS pod uses does not know; otherwise the system's resolver.
func healthResolver(cfg *config, server *dnsserver.Config) string {
	if cfg.healthURL == "" {
		return ""
	}
	u, err := url.Parse(cfg.healthURL)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil || plugin.Zones(cfg.zones).Matches(dns.Fqdn(host)) == "" {
		return ""
	}
	addr := "127.0.0.1"
	if len(server.ListenHosts) > 0 && server.ListenHosts[0] != "" {
		if a, err := netip.ParseAddr(server.ListenHosts[0]); err == nil && !a.IsUnspecified() {
			addr = a.String()
		}
	}
	return net.JoinHostPort(addr, server.Port)
}

// parseGatewayHealth parses gateway_health URL [INTERVAL].
func parseGatewayHealth(c *caddy.Controller, cfg *config, args []string) error {
	u, err := url.Parse(args[0])
	if err != nil {
		return c.Errf("gateway_health: bad URL %q: %v", args[0], err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c.Errf("gateway_health: bad URL %q: want http:// or https:// and a host", args[0])
	}
	cfg.healthURL, cfg.healthInterval = args[0], defaultHealthInterval
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return c.Errf("gateway_health: bad interval %q: %v", args[1], err)
		}
		if d <= 0 {
			return c.Errf("gateway_health: bad interval %q: must be positive", args[1])
		}
		cfg.healthInterval = d
	}
	return nil
}

// parseClusterSet parses clusterset [ZONE...]: zones of the stanza, not
// reverse ones, that answer the names of the Multi-Cluster Services DNS
// specification; clusterset.local without any.
func parseClusterSet(c *caddy.Controller, cfg *config, args []string) error {
	if len(args) == 0 {
		args = []string{defaultClusterSetZone}
	}
	cfg.clusterset = []string{}
	for _, a := range args {
		zs := plugin.Host(a).NormalizeExact()
		if len(zs) != 1 {
			return c.Errf("clusterset: %q is not a zone", a)
		}
		z := zs[0]
		switch {
		case isReverse(z):
			return c.Errf("clusterset: %s is a reverse zone", z)
		case !slices.Contains(cfg.zones, z):
			return c.Errf("clusterset: %s is not one of mcmirror's zones (%s): name it on the mcmirror line or in the server block", z, strings.Join(cfg.zones, " "))
		case slices.Contains(cfg.clusterset, z):
			return c.Errf("clusterset: %s given twice", z)
		}
		cfg.clusterset = append(cfg.clusterset, z)
	}
	return nil
}

// where returns the file and line the dispenser is at.
func where(c *caddy.Controller) string { return fmt.Sprintf("%s:%d", c.File(), c.Line()) }

// options are the settings of the plugin the stanza makes.
func (cfg *config) options() Options {
	return Options{
		Zones:          cfg.zones,
		Cluster:        cfg.cluster,
		TTL:            cfg.ttl,
		StartupTimeout: cfg.startupTimeout,
		StaleMaxAge:    cfg.staleMaxAge,
		ExportSelector: cfg.exportSel,
		Fall:           cfg.fall,

		GatewayHealthURL:      cfg.healthURL,
		GatewayHealthInterval: cfg.healthInterval,
		GatewayHealthResolver: cfg.healthResolver,
		AllowedCIDRs:          cfg.allowed.lists,
		ClusterSet:            cfg.clusterset,
		Import:                cfg.imports,
	}
}

// build makes the plugin: it loads the kubeconfigs and makes the clients.
func (cfg *config) build() (*MCMirror, error) {
	localCfg, err := cfg.localConfig()
	if err != nil {
		return nil, err
	}
	local, err := newClient(localCfg)
	if err != nil {
		return nil, err
	}
	m, err := New(local, cfg.options())
	if err != nil {
		return nil, err
	}
	reserved := []string{cfg.cluster}
	for i, l := range cfg.links {
		rc, err := l.Config()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.linksAt[i], err)
		}
		client, err := newClient(rc)
		if err != nil {
			return nil, fmt.Errorf("%s: link %s: %w", cfg.linksAt[i], l.Name, err)
		}
		if err := m.watch.AddNarrowedLink(l.Name, client, l.Namespaces); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.linksAt[i], err)
		}
		reserved = append(reserved, l.Name)
	}
	if cfg.secrets {
		w, err := link.NewSecretWatcher(local, m.LinkHandler(), link.SecretWatcherOptions{
			Namespace: cfg.secretsNS,
			Selector:  cfg.secretsSel,
			Reserved:  reserved,
			Allow:     cfg.allow,
			Logf:      log.Warningf,
			OnRefused: func(_ *corev1.Secret, reason link.Reason, _ error) {
				linkRefused.WithLabelValues(string(reason)).Inc()
			},
		})
		if err != nil {
			return nil, err
		}
		m.watch.WatchSecrets(w)
	}
	return m, nil
}

func (cfg *config) localConfig() (*rest.Config, error) {
	if cfg.kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given and not running in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := link.LoadKubeconfig(cfg.kubeconfig, cfg.context)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.kubeconfigAt, err)
	}
	return rc, nil
}

// newClient makes the client of a cluster, local or linked, so that the API
// servers see every request of the plugin under one user agent.
func newClient(rc *rest.Config) (kubernetes.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "coredns-mcmirror"
	return kubernetes.NewForConfig(rc)
}

// LinkHandler returns the link.Handler that adds and removes links of m:
// what a link.SecretWatcher (or a controller of one's own) reports to.
func (m *MCMirror) LinkHandler() link.Handler {
	return link.HandlerFuncs{
		AddFunc: func(name string, rc *rest.Config, ns link.Namespaces) {
			client, err := newClient(rc)
			if err != nil {
				log.Errorf("Link %s: %v", name, err)
				return
			}
			if err := m.watch.ReplaceNarrowedLink(name, client, ns); err != nil {
				log.Errorf("Link %s: %v", name, err)
				return
			}
			log.Infof("Linked cluster %s (%s), namespaces: %s", name, rc.Host, ns)
		},
		RemoveFunc: m.watch.RemoveLink,
	}
}

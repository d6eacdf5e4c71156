package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// FleetOptions describes mcmirror deployed for one cluster that links to
// others, every part a real `coredns-mc` process: the local cluster's DNS
// (mcmirror in front of kubernetes, on the node), mirror controller (on the
// host: it needs nothing but the API servers) and gateway egress, and each
// linked cluster's gateway ingress. Every cluster needs a data plane.
type FleetOptions struct {
	// Local is the cluster whose pods resolve and connect, e.g. "east".
	Local string
	// Remotes are the clusters Local links to.
	Remotes []string
	// LinkSecrets, when set, is the namespace of Local where the link
	// Secrets are (`coredns-mc link` writes them there): the DNS plugin and
	// the controller follow them. Otherwise each remote is linked with a
	// kubeconfig file holding the token of deploy/remote-link.yaml's
	// ServiceAccount.
	LinkSecrets string
	// EgressPorts is the controller's egress port range (default
	// 30000-30999).
	EgressPorts string
}

// Fleet is a running FleetOptions.
type Fleet struct {
	// DNS is the local cluster's DNS server.
	DNS *DNSServer
	// Controller is the local cluster's mirror controller.
	Controller *Process
	// Gateways by cluster: the local one runs the egress, the remote ones
	// the ingress.
	Gateways map[string]*Gateway
}

// fleetCorefile is the local cluster DNS: mcmirror for the multi-cluster
// names, kubernetes for the cluster's own, loadbalance to shuffle answers
// as deploy/coredns.yaml does.
const fleetCorefile = `. {
    errors
    ready {HOST}:{READY}
    prometheus {HOST}:{METRICS}
    loadbalance
    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster %[1]s
        kubeconfig %[2]s
%[3]s        gateway_health %[4]s/peers
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`

// LaunchFleet starts a fleet and waits until each part serves. Its
// processes run until the environment stops.
func (e *Env) LaunchFleet(ctx context.Context, o FleetOptions) (*Fleet, error) {
	if o.EgressPorts == "" {
		o.EgressPorts = "30000-30999"
	}
	bin, err := CorednsMC()
	if err != nil {
		return nil, err
	}
	local := e.Cluster(o.Local)
	ca, err := gatewaytest.NewCA("mcmirror " + o.Local + " fleet")
	if err != nil {
		return nil, err
	}
	tlsDir := filepath.Join(e.Dir, "gateway-tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, err
	}
	f := &Fleet{Gateways: map[string]*Gateway{}}
	peers := map[string]string{}
	var links, linkFlags []string
	if o.LinkSecrets != "" {
		links = append(links, fmt.Sprintf("        link_secrets %s\n", o.LinkSecrets))
		linkFlags = append(linkFlags, "--link-secrets", o.LinkSecrets)
	}
	for _, name := range o.Remotes {
		c := e.Cluster(name)
		tls, err := ca.IssueFiles(tlsDir, name, gatewaytest.Options{})
		if err != nil {
			return nil, err
		}
		g, err := e.LaunchGateway(c, GatewayOptions{TLS: tls, Ingress: true, InNode: true,
			Args: []string{"--allow-cluster", o.Local}})
		if err != nil {
			return nil, err
		}
		f.Gateways[name], peers[name] = g, g.IngressAddr
		if o.LinkSecrets != "" {
			continue
		}
		kc, err := c.LinkKubeconfig(ctx)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(e.Dir, name+"-link.kubeconfig")
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			return nil, err
		}
		links = append(links, fmt.Sprintf("        link %s %s\n", name, path))
		linkFlags = append(linkFlags, "--link", name+"="+path)
	}
	tls, err := ca.IssueFiles(tlsDir, o.Local, gatewaytest.Options{})
	if err != nil {
		return nil, err
	}
	if f.Gateways[o.Local], err = e.LaunchGateway(local, GatewayOptions{TLS: tls, Egress: true, InNode: true,
		Peers: peers, Args: []string{"--probe-interval", "1s"}}); err != nil {
		return nil, err
	}
	// The mirrors point at the local gateway's egress, on the node.
	if f.Controller, err = e.Launch(o.Local+"/controller", nil, append([]string{bin, "controller",
		"--kubeconfig", local.Kubeconfig,
		"--cluster", o.Local,
		"--egress-address", local.NodeIP().String(),
		"--egress-ports", o.EgressPorts,
		"--metrics-addr", "",
	}, linkFlags...)...); err != nil {
		return nil, err
	}
	corefile := fmt.Sprintf(fleetCorefile, o.Local, local.Kubeconfig, strings.Join(links, ""), f.Gateways[o.Local].MetricsURL)
	if f.DNS, err = e.LaunchClusterDNS(ctx, local, corefile); err != nil {
		return nil, err
	}
	return f, nil
}

package harness

import (
	"context"
	"os"
	"slices"
	"testing"
)

// Parts are the processes of a fleet (FleetOptions.Parts).
type Parts uint8

const (
	// FleetDNS is the local cluster's DNS: mcmirror before kubernetes.
	FleetDNS Parts = 1 << iota
	// FleetController is the local cluster's mirror controller.
	FleetController
	// FleetGateways are the local cluster's gateway egress and each
	// remote's gateway ingress: the path between clusters in gateway
	// mode. A fleet without them is flat mode's, where pods reach other
	// clusters' pod IPs (Env.RoutePodsBetweenClusters).
	FleetGateways
	// AllParts is what a cluster that links to others runs.
	AllParts = FleetDNS | FleetController | FleetGateways
)

// FleetOptions describes mcmirror deployed for one cluster that links to
// others, every part a real `coredns-mc` process: the local cluster's DNS
// (mcmirror in front of kubernetes), mirror controller (on the host: it
// needs nothing but the API servers) and gateway egress, and each linked
// cluster's gateway ingress. A test package asks for the parts its tests
// need, configured as they need them; the control planes are the
// package's, started once.
//
// Where the parts run follows the local cluster. With a data plane, the
// DNS is the cluster DNS in the node (kube-dns's address, port 53), the
// gateways run in their nodes as hostNetwork pods do (every remote needs a
// data plane too), and the mirrors point at the egress on the local node.
// Without one, every part listens on 127.0.0.1 and the mirrors point at
// EgressAddress: clients dial the egress ports on 127.0.0.1
// (LoopbackAddr).
type FleetOptions struct {
	// Local is the cluster whose pods resolve and connect, e.g. "east".
	Local string
	// Remotes are the clusters Local links to, each with the read-only
	// credentials of deploy/remote-link.yaml (Cluster.LinkKubeconfigFile)
	// and, with FleetGateways, a gateway ingress that lets Local in.
	Remotes []string
	// Parts are the processes to run (default AllParts).
	Parts Parts
	// LinkSecrets, when set, is the namespace of Local where the link
	// Secrets are (`coredns-mc link` writes them there): the DNS plugin and
	// the controller follow them, and Remotes are linked through them
	// instead of by file.
	LinkSecrets string
	// Links are linked besides Remotes, each with its own kubeconfig
	// file: through a FaultProxy, with refused credentials, as an admin.
	Links []Link
	// EgressPorts is the controller's and the egress's port range
	// (default 30000-30999).
	EgressPorts string
	// Plugins are lines of the DNS server block before mcmirror, e.g.
	// "cache 30". The cluster DNS in a node runs loadbalance first, as
	// deploy/coredns.yaml does.
	Plugins []string
	// Block are lines of the DNS's mcmirror block after its links, e.g.
	// "ttl 5". With FleetGateways it reads the egress's /peers
	// (gateway_health).
	Block []string
	// Controller is more of the controller's options (Name, Kubeconfig,
	// Metrics, EgressAddress, EgressService, Args): the fleet sets its
	// links and egress ports, and, in a node, its egress address.
	Controller ControllerOptions
	// Gateway is more of every gateway's options (MemoryLimit, Args): the
	// fleet sets the rest.
	Gateway GatewayOptions
	// IngressArgs are more flags of the remotes' gateways, after
	// `--allow-cluster <Local>` and Gateway.Args.
	IngressArgs []string
}

// Fleet is a running FleetOptions. A part not asked for is nil.
type Fleet struct {
	// DNS is the local cluster's DNS server.
	DNS *DNSServer
	// Controller is the local cluster's mirror controller.
	Controller *Controller
	// Gateways by cluster: the local one runs the egress, the remote ones
	// the ingress.
	Gateways map[string]*Gateway
}

// Processes are the fleet's processes as they are now: what
// Env.RequireAlive checks before a test asserts that something stopped.
func (f *Fleet) Processes() []*Process {
	var out []*Process
	if f.DNS != nil {
		out = append(out, f.DNS.Process)
	}
	if f.Controller != nil {
		out = append(out, f.Controller.Process)
	}
	for _, g := range f.Gateways {
		out = append(out, g.Process())
	}
	return out
}

// StartFleet starts a fleet for the test t and waits until each part
// serves; its processes are stopped when t ends.
func (e *Env) StartFleet(t testing.TB, o FleetOptions) *Fleet {
	t.Helper()
	f, err := e.startFleet(t.Context(), t, o)
	if err != nil {
		t.Fatalf("harness: fleet of %s: %v", o.Local, err)
	}
	return f
}

// LaunchFleet is StartFleet outside tests (the demo, a package's fleet
// started once): its processes run until the environment stops.
func (e *Env) LaunchFleet(ctx context.Context, o FleetOptions) (*Fleet, error) {
	return e.startFleet(ctx, nil, o)
}

// startFleet starts o's parts, for the test t or, when t is nil, until the
// environment stops: the gateways, then the controller, then the DNS.
func (e *Env) startFleet(ctx context.Context, t testing.TB, o FleetOptions) (*Fleet, error) {
	if o.Parts == 0 {
		o.Parts = AllParts
	}
	if o.EgressPorts == "" {
		o.EgressPorts = "30000-30999"
	}
	local := e.Cluster(o.Local)
	f := &Fleet{Gateways: map[string]*Gateway{}}
	var links []Link
	if o.LinkSecrets == "" {
		for _, name := range o.Remotes {
			path, err := e.Cluster(name).LinkKubeconfigFile(ctx)
			if err != nil {
				return nil, err
			}
			links = append(links, Link{Name: name, Kubeconfig: path})
		}
	}
	links = append(links, o.Links...)
	if o.Parts&FleetGateways != 0 {
		if err := e.startGateways(t, o, f); err != nil {
			return nil, err
		}
	}
	run := e.starter(t)
	if o.Parts&FleetController != 0 {
		co := o.Controller
		co.Links, co.LinkSecrets, co.EgressPorts = links, o.LinkSecrets, o.EgressPorts
		if co.EgressAddress == "" && local.DataPlane {
			co.EgressAddress = local.NodeIP().String()
		}
		ctl, name, argv, err := controllerCommand(local, co)
		if err != nil {
			return nil, err
		}
		if ctl.Process, err = run(name, nil, argv...); err != nil {
			return nil, err
		}
		f.Controller = ctl
	}
	if o.Parts&FleetDNS == 0 {
		return f, nil
	}
	block := linkLines(links...)
	if o.LinkSecrets != "" {
		block += "        link_secrets " + o.LinkSecrets + "\n"
	}
	if g := f.Gateways[o.Local]; g != nil {
		block += "        gateway_health " + g.MetricsURL + "/peers\n"
	}
	for _, l := range o.Block {
		block += "        " + l + "\n"
	}
	// The cluster DNS in the node, as kube-dns's pods; otherwise a server
	// on 127.0.0.1.
	name, plugins, node := o.Local+"/coredns-mc", o.Plugins, (*Cluster)(nil)
	if local.DataPlane {
		name, plugins, node = o.Local+"/cluster-dns", append([]string{"loadbalance"}, plugins...), local
	}
	dir, err := e.tempDir(t)
	if err != nil {
		return nil, err
	}
	f.DNS, err = e.launchDNS(ctx, name, node, mirrorCorefile(local, plugins, block), dir, DNSOptions{}, func(argv ...string) (*Process, error) {
		if node != nil {
			if argv, err = node.inNode(argv...); err != nil {
				return nil, err
			}
		}
		return run(name, nil, argv...)
	})
	return f, err
}

// starter starts a process for the test t, stopped when t ends, or, when
// t is nil, until the environment stops.
func (e *Env) starter(t testing.TB) func(name string, env []string, argv ...string) (*Process, error) {
	if t == nil {
		return e.Launch
	}
	return func(name string, env []string, argv ...string) (*Process, error) {
		return e.StartProcess(t, name, env, argv...), nil
	}
}

// tempDir is a new directory for the test t or, when t is nil, for the
// environment.
func (e *Env) tempDir(t testing.TB) (string, error) {
	if t == nil {
		return os.MkdirTemp(e.Dir, "fleet-")
	}
	return t.TempDir(), nil
}

// startGateways starts the ingress of each remote, then the local egress
// with the remotes as its peers.
func (e *Env) startGateways(t testing.TB, o FleetOptions, f *Fleet) error {
	dir, err := e.tempDir(t)
	if err != nil {
		return err
	}
	tls, err := e.gatewayTLS(dir, append([]string{o.Local}, o.Remotes...)...)
	if err != nil {
		return err
	}
	inNode := e.Cluster(o.Local).DataPlane
	start := func(c *Cluster, g GatewayOptions) (*Gateway, error) {
		g.TLS, g.InNode = tls[c.Name], inNode
		if t != nil {
			return e.StartGateway(t, c, g), nil
		}
		return e.LaunchGateway(c, g)
	}
	peers := map[string]string{}
	for _, name := range o.Remotes {
		g := o.Gateway
		g.Ingress = true
		g.Args = slices.Concat([]string{"--allow-cluster", o.Local}, o.Gateway.Args, o.IngressArgs)
		if f.Gateways[name], err = start(e.Cluster(name), g); err != nil {
			return err
		}
		peers[name] = f.Gateways[name].IngressAddr
	}
	g := o.Gateway
	g.Egress, g.Peers = true, peers
	g.Args = slices.Concat([]string{"--probe-interval", "1s", "--egress-ports", o.EgressPorts}, o.Gateway.Args)
	f.Gateways[o.Local], err = start(e.Cluster(o.Local), g)
	return err
}

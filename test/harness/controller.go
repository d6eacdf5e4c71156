package harness

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// EgressAddress is the gateway egress address a fleet's controller writes
// into its mirrors' EndpointSlices unless told otherwise: an address of
// TEST-NET-1, which the API server accepts as an endpoint and nothing here
// routes to. Tests that carry traffic connect to
// the egress ports on 127.0.0.1, or run in a fleet of clusters with a
// data plane, whose controller points at the egress on the node.
const EgressAddress = "192.0.2.10"

// Link is one cluster a coredns-mc process links to: the name it is
// linked under and the kubeconfig file it reads that cluster with.
type Link struct {
	Name, Kubeconfig string
}

// ControllerOptions describes one `coredns-mc controller` of a cluster, as
// a fleet runs it (FleetOptions.Controller).
type ControllerOptions struct {
	// Name is the process's name after "<cluster>/" (default
	// "controller"); a test that starts several gives each its own.
	Name string
	// Kubeconfig is how the controller reaches its own cluster (default
	// the cluster's admin kubeconfig).
	Kubeconfig string
	// Links are linked with the kubeconfig files given.
	Links []Link
	// LinkSecrets is the namespace of the cluster whose link Secrets the
	// controller follows (--link-secrets); none when empty.
	LinkSecrets string
	// EgressAddress is written into the mirrors' EndpointSlices (default
	// EgressAddress).
	EgressAddress string
	// EgressService, "namespace/name", makes the controller point the
	// mirrors at the endpoints of that Service instead of EgressAddress.
	EgressService string
	// EgressPorts is the egress port range (default 30000-30999).
	EgressPorts string
	// Metrics serves /metrics and /healthz on a free port of 127.0.0.1
	// (Controller.MetricsAddr); otherwise the controller serves none.
	Metrics bool
	// Args are more flags, after the others: a flag given again here wins.
	Args []string
}

// Controller is a running `coredns-mc controller`.
type Controller struct {
	*Process
	// MetricsAddr is host:port of /metrics and /healthz when
	// ControllerOptions.Metrics is set.
	MetricsAddr string
}

// MetricsURL is the URL of the controller's /metrics ("" without
// ControllerOptions.Metrics).
func (c *Controller) MetricsURL() string {
	if c.MetricsAddr == "" {
		return ""
	}
	return "http://" + c.MetricsAddr + "/metrics"
}

// controllerCommand returns the controller o describes (its process not
// started yet), the process's name and its command.
func controllerCommand(c *Cluster, o ControllerOptions) (*Controller, string, []string, error) {
	bin, err := CorednsMC()
	if err != nil {
		return nil, "", nil, err
	}
	name, kubeconfig, egress, ports := o.Name, o.Kubeconfig, o.EgressAddress, o.EgressPorts
	if name == "" {
		name = "controller"
	}
	if kubeconfig == "" {
		kubeconfig = c.Kubeconfig
	}
	if egress == "" {
		egress = EgressAddress
	}
	if ports == "" {
		ports = "30000-30999"
	}
	ctl := &Controller{}
	if o.Metrics {
		port, err := freePort()
		if err != nil {
			return nil, "", nil, err
		}
		ctl.MetricsAddr = "127.0.0.1:" + strconv.Itoa(port)
	}
	argv := []string{bin, "controller", "--kubeconfig", kubeconfig, "--cluster", c.Name}
	if o.EgressService != "" {
		argv = append(argv, "--egress-service", o.EgressService)
	} else {
		argv = append(argv, "--egress-address", egress)
	}
	argv = append(argv, "--egress-ports", ports, "--metrics-addr", ctl.MetricsAddr, "--v", "2")
	for _, l := range o.Links {
		argv = append(argv, "--link", l.Name+"="+l.Kubeconfig)
	}
	if o.LinkSecrets != "" {
		argv = append(argv, "--link-secrets", o.LinkSecrets)
	}
	return ctl, c.Name + "/" + name, append(argv, o.Args...), nil
}

// Egress port windows: 100 ports each, below the kernel's ephemeral range
// (32768 and up), at a random offset per run so that parallel runs rarely
// meet.
var (
	portBase   = 20000 + 100*rand.IntN(100)
	portWindow atomic.Int32
)

// PortRange is a range of ports, Lo to Hi.
type PortRange struct{ Lo, Hi int }

// String is "lo-hi", as --egress-ports takes it.
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// EgressPortWindow returns a range of 100 egress ports that no other call
// of this run returned before the hundredth: a test that runs a
// controller and a gateway of its own gives them one, so that no two tests
// (nor a mirror a test before left behind) share an egress port.
func EgressPortWindow() PortRange {
	i := int(portWindow.Add(1) - 1)
	lo := 20000 + (portBase-20000+100*i)%10000
	return PortRange{lo, lo + 99}
}

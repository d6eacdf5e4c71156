package harness

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// nodeNet is the network of the simulated nodes of the clusters started
// with DataPlane: a bridge on the host, with an address of the host's that
// the API servers listen on, and one network namespace per node joined to
// it by a veth pair. Node namespaces reach the host and each other on the
// bridge; nothing else. They have no default route, so a packet for an
// address the harness did not create goes nowhere.
//
// Pods hang off their node's namespace (see podRunner): the node routes
// each pod's address to the pod's veth and forwards between them, and the
// rules of the node's kube-proxy apply to what pods send, as on a real node.
type nodeNet struct {
	block  netip.Prefix // the bridge's subnet, a /22 of podRange
	bridge string       // mcm<pid>br
	host   netip.Addr   // the host's address on the bridge
	prefix string       // namespace name prefix, "mcm<pid>-"

	mu     sync.Mutex
	nodes  map[string]*node // by cluster name
	routes []netip.Prefix   // blackhole routes held on the host
	flat   bool
}

// node is the network namespace of one cluster's simulated node.
type node struct {
	cluster string
	netns   string
	ip      netip.Addr
	podCIDR netip.Prefix
}

// podGatewayIP is the address every pod's default route points at: the
// node answers for it on each pod's veth, as Calico's nodes do.
var podGatewayIP = netip.MustParseAddr("169.254.1.1")

func newNodeNet() (*nodeNet, error) {
	block, err := freeBlock()
	if err != nil {
		return nil, err
	}
	pid := strconv.Itoa(os.Getpid())
	n := &nodeNet{
		block:  block,
		bridge: "mcm" + pid + "br",
		host:   block.Addr().Next(),
		prefix: "mcm" + pid + "-",
		nodes:  map[string]*node{},
	}
	if err := n.holdRoute(block); err != nil {
		return nil, err
	}
	for _, s := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.host.String() + "/" + strconv.Itoa(block.Bits()), "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if err := ip(s...); err != nil {
			n.removeAll()
			return nil, err
		}
	}
	return n, nil
}

// holdRoute adds a blackhole route for p on the host, with this process's
// PID as its metric (so that a later run sweeps it if this one is killed):
// traffic for an address of p that nothing here holds is dropped on this
// machine instead of following the default route.
func (n *nodeNet) holdRoute(p netip.Prefix) error {
	if err := ip("route", "add", "blackhole", p.String(), "metric", strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	n.mu.Lock()
	n.routes = append(n.routes, p)
	n.mu.Unlock()
	return nil
}

// addNode creates the node namespace of cluster c, with the k-th address
// of the bridge's subnet after the host's.
func (n *nodeNet) addNode(c *Cluster, k int) (*node, error) {
	a := n.block.Addr().As4()
	a[3] += byte(10 + k)
	nd := &node{cluster: c.Name, netns: n.prefix + "node-" + c.Name, ip: netip.AddrFrom4(a), podCIDR: c.PodCIDR}
	host := fmt.Sprintf("m%dn%d", os.Getpid(), k)
	n.mu.Lock()
	n.nodes[c.Name] = nd
	n.mu.Unlock()
	// The cluster's own ranges must never leave this machine either.
	for _, p := range []netip.Prefix{c.PodCIDR, c.ServiceCIDR} {
		if err := n.holdRoute(p); err != nil {
			return nil, err
		}
	}
	bits := strconv.Itoa(n.block.Bits())
	for _, s := range [][]string{
		{"netns", "add", nd.netns},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", nd.netns},
		{"link", "set", host, "master", n.bridge, "up"},
		{"-n", nd.netns, "link", "set", "lo", "up"},
		{"-n", nd.netns, "addr", "add", podGatewayIP.String() + "/32", "dev", "lo"},
		{"-n", nd.netns, "addr", "add", nd.ip.String() + "/" + bits, "dev", "eth0"},
		{"-n", nd.netns, "link", "set", "eth0", "up"},
	} {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	// A node forwards between its pods, and to other nodes in flat mode.
	if out, err := exec.Command("ip", "netns", "exec", nd.netns, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip_forward in %s: %v: %s", nd.netns, err, out)
	}
	return nd, nil
}

// setFlat adds (on) or removes (off) routes between the nodes for each
// other's pod CIDRs: pod IPs are then reachable across clusters, as flat
// mode needs. Without them only node addresses are (gateway mode: a
// cluster reaches another only through its gateway's ingress).
func (n *nodeNet) setFlat(on bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.flat == on {
		return nil
	}
	for _, a := range n.nodes {
		for _, b := range n.nodes {
			if a == b {
				continue
			}
			var err error
			if on {
				err = ip("-n", a.netns, "route", "replace", b.podCIDR.String(), "via", b.ip.String())
			} else {
				err = ip("-n", a.netns, "route", "del", b.podCIDR.String(), "via", b.ip.String())
			}
			if err != nil {
				return err
			}
		}
	}
	n.flat = on
	return nil
}

// removeAll deletes the node namespaces (their veth pairs go with them),
// the bridge and the host's blackhole routes.
func (n *nodeNet) removeAll() {
	n.mu.Lock()
	nodes, routes := n.nodes, n.routes
	n.nodes, n.routes = map[string]*node{}, nil
	n.mu.Unlock()
	for _, nd := range nodes {
		_ = ip("netns", "del", nd.netns)
	}
	_ = ip("link", "del", n.bridge)
	for _, p := range routes {
		_ = ip("route", "del", "blackhole", p.String(), "metric", strconv.Itoa(os.Getpid()))
	}
}

// sweepStaleBridges deletes the bridges of harness runs whose process is
// gone.
func sweepStaleBridges() {
	out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line) // 12: mcm1234br: <...>
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		pidStr, ok := strings.CutPrefix(strings.TrimSuffix(name, "br"), "mcm")
		if !ok || !strings.HasSuffix(name, "br") {
			continue
		}
		if pid, err := strconv.Atoi(pidStr); err == nil && !alive(pid) {
			_ = ip("link", "del", name)
		}
	}
}

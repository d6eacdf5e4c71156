package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Pod is a real server reachable at an address of its own: a process in a
// network namespace the harness created, joined to the host by a veth pair.
// The API server refuses loopback addresses in EndpointSlices; a Pod's
// address is accepted and really answers, from the host and from other pods.
type Pod struct {
	// Name of the pod, e.g. "nginx-set-0".
	Name string
	// Cluster the pod stands for.
	Cluster *Cluster
	// IP is the pod's own address.
	IP netip.Addr
	// Gateway is the host end of the pod's link: the host's address as the
	// pod sees it.
	Gateway netip.Addr
	// Netns is the name of the pod's network namespace.
	Netns string
	// HostInterface is the host end of the pod's veth pair.
	HostInterface string
	// Process is the server running in the namespace.
	Process *Process
}

// Command is a program for a pod: its arguments and its extra environment.
type Command struct {
	Argv []string
	Env  []string
}

// RunPod starts cmd as a pod of cluster c, in a new network namespace with an
// address of its own, and removes both when t ends. The process gets
// MCMIRROR_POD_NAME=<cluster>/<name> and MCMIRROR_POD_IP in its environment.
func (c *Cluster) RunPod(t testing.TB, name string, cmd Command) *Pod {
	t.Helper()
	pod, err := c.env.pods.add()
	if err != nil {
		t.Fatalf("pod %s/%s: %v", c.Name, name, err)
	}
	t.Cleanup(func() { c.env.pods.remove(pod.ns) })
	p := &Pod{Name: name, Cluster: c, IP: pod.ip, Gateway: pod.gw, Netns: pod.ns, HostInterface: pod.host}
	env := append([]string{"MCMIRROR_POD_NAME=" + c.Name + "/" + name, "MCMIRROR_POD_IP=" + pod.ip.String()}, cmd.Env...)
	argv := append([]string{"ip", "netns", "exec", pod.ns}, cmd.Argv...)
	// Registered after the namespace's cleanup, so it runs before it.
	p.Process = c.env.StartProcess(t, c.Name+"/pod/"+name, env, argv...)
	return p
}

// podNet hands out pod addresses from a /22 that no interface of the host
// uses, one /30 per pod (host end .1, pod .2), and removes the namespaces.
type podNet struct {
	block  netip.Prefix
	prefix string // netns name prefix: "mcm<pid>-", so a sweep knows the owner

	mu   sync.Mutex
	next int               // next /30 of block
	live map[string]string // namespaces not yet removed → host interface
}

type podAddr struct {
	ns, host string // namespace and host interface
	gw, ip   netip.Addr
}

func newPodNet() (*podNet, error) {
	sweepStaleNetns()
	block, err := freeBlock()
	if err != nil {
		return nil, err
	}
	// Traffic to an address of the block that no pod holds (one that is
	// gone, say) must stay on this machine rather than follow the default
	// route: a blackhole route for the block drops it here, while each live
	// pod's /30 route is more specific and wins.
	// Its metric is this process's PID, so that a later run can sweep the
	// route of a run that was killed.
	if err := ip("route", "add", "blackhole", block.String(), "metric", strconv.Itoa(os.Getpid())); err != nil {
		return nil, err
	}
	return &podNet{block: block, prefix: fmt.Sprintf("mcm%d-", os.Getpid()), live: map[string]string{}}, nil
}

// add creates a namespace with a veth pair and addresses.
func (n *podNet) add() (podAddr, error) {
	n.mu.Lock()
	k := n.next
	n.next++
	n.mu.Unlock()
	if k >= 1<<(32-n.block.Bits()-2) {
		return podAddr{}, fmt.Errorf("no pod addresses left in %s", n.block)
	}
	base := n.block.Addr().As4()
	off := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + uint32(4*k)
	at := func(i uint32) netip.Addr {
		v := off + i
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	// Interface names are limited to 15 bytes.
	host, peer := fmt.Sprintf("m%dh%d", os.Getpid(), k), fmt.Sprintf("m%dp%d", os.Getpid(), k)
	a := podAddr{ns: n.prefix + strconv.Itoa(k), host: host, gw: at(1), ip: at(2)}
	n.mu.Lock()
	n.live[a.ns] = host
	n.mu.Unlock()
	steps := [][]string{
		{"netns", "add", a.ns},
		{"link", "add", host, "type", "veth", "peer", "name", peer, "netns", a.ns},
		{"addr", "add", a.gw.String() + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", a.ns, "link", "set", "lo", "up"},
		{"-n", a.ns, "addr", "add", a.ip.String() + "/30", "dev", peer},
		{"-n", a.ns, "link", "set", peer, "up"},
		{"-n", a.ns, "route", "add", "default", "via", a.gw.String()},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			n.remove(a.ns)
			return podAddr{}, err
		}
	}
	return a, nil
}

// remove deletes a namespace and its veth pair. The kernel frees a deleted
// namespace, and the links in it, asynchronously; deleting the host end
// first takes the pair, and the route to the pod, down at once.
func (n *podNet) remove(ns string) {
	n.mu.Lock()
	host, live := n.live[ns]
	delete(n.live, ns)
	n.mu.Unlock()
	if live {
		_ = ip("link", "del", host)
		_ = ip("netns", "del", ns)
	}
}

// removeAll deletes every namespace still there and the block's route.
func (n *podNet) removeAll() {
	defer func() {
		_ = ip("route", "del", "blackhole", n.block.String(), "metric", strconv.Itoa(os.Getpid()))
	}()
	n.mu.Lock()
	var all []string
	for ns := range n.live {
		all = append(all, ns)
	}
	n.mu.Unlock()
	for _, ns := range all {
		n.remove(ns)
	}
}

// sweepStaleNetns deletes the namespaces and routes of harness runs whose
// process is gone (a test binary that was killed cannot clean up after
// itself).
func sweepStaleNetns() {
	for p, pid := range blackholes() {
		if pid > 0 && !alive(pid) {
			_ = ip("route", "del", "blackhole", p.String(), "metric", strconv.Itoa(pid))
		}
	}
	sweepStaleBridges()
	for _, dir := range []string{"/run/netns", "/etc/netns"} {
		sweepStaleNames(dir)
	}
}

// sweepStaleNames deletes the namespaces (under /run/netns) or their
// configuration directories (under /etc/netns) of runs that are gone.
func sweepStaleNames(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !deadRun(e.Name()) {
			continue
		}
		if dir == "/run/netns" {
			_ = ip("netns", "del", e.Name())
		} else {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// deadRun reports whether name is one the harness gives what a run makes
// on the host, mcm<pid>-..., and that run's process is gone.
func deadRun(name string) bool {
	rest, ok := strings.CutPrefix(name, "mcm")
	if !ok {
		return false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return ok && err == nil && !alive(pid)
}

// podRange holds every block the harness picks pod addresses from.
var podRange = netip.MustParsePrefix("10.248.0.0/13")

// heldRange holds every range the harness adds blackhole routes for: pod
// blocks, node networks, and the pod and service CIDRs of clusters with a
// data plane.
var heldRange = netip.MustParsePrefix("10.0.0.0/8")

// blackholes returns the blackhole routes in heldRange with their metric
// (the PID of the harness run that added them).
func blackholes() map[netip.Prefix]int {
	out, err := exec.Command("ip", "-4", "route", "show", "type", "blackhole").Output()
	if err != nil {
		return nil
	}
	routes := map[netip.Prefix]int{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line) // blackhole 10.249.12.0/22 metric 1234
		if len(f) < 2 {
			continue
		}
		p, err := netip.ParsePrefix(f[1])
		if err != nil || !heldRange.Overlaps(p) {
			continue
		}
		metric := 0
		if i := slices.Index(f, "metric"); i >= 0 && i+1 < len(f) {
			metric, _ = strconv.Atoi(f[i+1])
		}
		routes[p] = metric
	}
	return routes
}

// freeBlock picks a /22 in podRange that no host interface address falls in
// and no route of another run holds, so that parallel runs and the host's
// own networks never collide.
func freeBlock() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	taken := blackholes()
	for range 100 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(248 + rand.IntN(8)), byte(4 * rand.IntN(64)), 0}), 22)
		_, used := taken[p]
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if pa, ok := netip.AddrFromSlice(ipn.IP); ok && p.Contains(pa.Unmap()) {
					used = true
					break
				}
			}
		}
		if !used {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /22 for pods in 10.248.0.0/13")
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
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
	p := &Pod{Name: name, Cluster: c, IP: pod.ip, Gateway: pod.gw, Netns: pod.ns}
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
	next int             // next /30 of block
	live map[string]bool // namespaces not yet removed
}

type podAddr struct {
	ns     string
	gw, ip netip.Addr
}

func newPodNet() (*podNet, error) {
	sweepStaleNetns()
	block, err := freeBlock()
	if err != nil {
		return nil, err
	}
	return &podNet{block: block, prefix: fmt.Sprintf("mcm%d-", os.Getpid()), live: map[string]bool{}}, nil
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
	a := podAddr{ns: n.prefix + strconv.Itoa(k), gw: at(1), ip: at(2)}
	// Interface names are limited to 15 bytes.
	host, peer := fmt.Sprintf("m%dh%d", os.Getpid(), k), fmt.Sprintf("m%dp%d", os.Getpid(), k)
	n.mu.Lock()
	n.live[a.ns] = true
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

// remove deletes a namespace; its veth pair goes with it.
func (n *podNet) remove(ns string) {
	n.mu.Lock()
	live := n.live[ns]
	delete(n.live, ns)
	n.mu.Unlock()
	if live {
		_ = ip("netns", "del", ns)
	}
}

// removeAll deletes every namespace still there.
func (n *podNet) removeAll() {
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

// sweepStaleNetns deletes the namespaces of harness runs whose process is
// gone (a test binary that was killed cannot clean up after itself).
func sweepStaleNetns() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "mcm")
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || alive(pid) {
			continue
		}
		_ = ip("netns", "del", e.Name())
	}
}

// freeBlock picks a /22 in 10.248.0.0/13 that no host interface address
// falls in, so that parallel runs and the host's own networks never collide.
func freeBlock() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	for range 100 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(248 + rand.IntN(8)), byte(4 * rand.IntN(64)), 0}), 22)
		used := false
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

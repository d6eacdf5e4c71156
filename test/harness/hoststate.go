package harness

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hostLockPath serialises environments with real nodes on one machine: the
// kubelet writes a few host-wide paths and sysctls whatever its flags say,
// so two such environments at once would undo each other's.
const hostLockPath = "/run/mcmirror-realnode.lock"

// hostStatePath keeps, while real nodes run, what release must put back
// (the saved sysctls, the paths to remove), so that the next environment
// puts it back if this one's process is killed before it can.
const hostStatePath = "/run/mcmirror-realnode.state"

// kubeletSysctls are the host-wide settings the kubelet changes at start
// (setupKernelTunables). They are saved before the first real node starts
// and written back after the last one stops.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// kubeletHostPaths are paths that the kubelet, containerd or the CNI library
// use whatever their flags say. Each one that did not exist before is
// removed at the end.
var kubeletHostPaths = []string{
	"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pki", "/var/lib/kubelet/plugins",
	"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/pod-resources",
	"/var/lib/kubelet/checkpoints", "/var/log/containers", "/var/log/pods",
	"/var/lib/cni", "/run/containerd",
}

// hostState is what an environment with real nodes changes on the host, and
// how to undo it.
type hostState struct {
	mu      sync.Mutex
	held    bool
	lock    *os.File
	sysctls map[string]string // saved values, by /proc/sys path
	absent  []string          // host paths that did not exist, to remove
	cgroups []string          // cgroup roots made, relative to a hierarchy
	dns     *upstreamDNS      // the nodes' upstream resolver
	// kubelets lets one kubelet start at a time (startKubelet).
	kubelets sync.Mutex
}

// hold takes the host for real nodes, once per environment: the lock, the
// saved sysctls, the list of paths to remove, and the nodes' upstream
// resolver on host.
func (h *hostState) hold(host netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		return nil
	}
	f, err := os.OpenFile(hostLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "harness: waiting for another environment with real nodes to end (%s)\n", hostLockPath)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return err
		}
	}
	h.lock = f
	// Holding the lock, whatever real nodes' state is on the host is of a
	// run that died: put it back first.
	sweepDeadRealNodes()
	h.sysctls = map[string]string{}
	for _, s := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			continue // not on this kernel: the kubelet skips it too
		}
		h.sysctls[s] = strings.TrimSpace(string(b))
	}
	seen := map[string]bool{}
	for _, p := range kubeletHostPaths {
		// The highest ancestor that does not exist is what to remove.
		top := ""
		for q := p; q != "/"; q = filepath.Dir(q) {
			if _, err := os.Lstat(q); errors.Is(err, os.ErrNotExist) {
				top = q
			}
		}
		if top != "" && !seen[top] {
			seen[top] = true
			h.absent = append(h.absent, top)
		}
	}
	if err := h.save(); err != nil {
		f.Close()
		return err
	}
	if h.dns, err = startUpstreamDNS(host); err != nil {
		f.Close() // and with it the lock
		return err
	}
	h.held = true
	return nil
}

// cgroupHierarchies lists the mounted cgroup v1 hierarchies, e.g.
// /sys/fs/cgroup/memory.
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup" {
			out = append(out, f[4])
		}
	}
	return out, nil
}

// makeCgroup creates root in every cgroup v1 hierarchy, as the kubelet's
// cgroupRoot must exist before it starts; cpuset gets its parent's CPUs
// and memory nodes, without which no process may join it.
func (h *hostState) makeCgroup(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.cgroups = append(h.cgroups, root)
	h.mu.Unlock()
	for _, hier := range hs {
		dir := filepath.Join(hier, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(hier, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroup kills every process left under root in any hierarchy and
// removes root and everything below it.
func removeCgroup(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, hier := range hs {
		top := filepath.Join(hier, root)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: a cgroup is removed only once it has no children.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := emptyCgroup(d); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// emptyCgroup kills the processes of cgroup dir and waits until it has none.
func emptyCgroup(dir string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return nil // gone already
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v", dir, pids)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts, nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("umount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// release undoes what hold and makeCgroup did, once every real node is
// down: cgroups, sysctls, host paths; then it lets the next environment
// with real nodes start.
func (h *hostState) release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return nil
	}
	h.dns.stop()
	var errs []error
	for _, root := range h.cgroups {
		if err := removeCgroup(root); err != nil {
			errs = append(errs, err)
		}
	}
	for s, v := range h.sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", s, err))
		}
	}
	for _, p := range h.absent {
		if err := unmountUnder(p); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(hostStatePath)
	}
	h.held = false
	_ = syscall.Flock(int(h.lock.Fd()), syscall.LOCK_UN)
	h.lock.Close()
	return errors.Join(errs...)
}

// leftovers lists what a stopped real node left on the host: mounts under
// its directory, its cgroups, shims of its containerd.
func (n *realNode) leftovers() []string {
	var left []string
	if m, _ := mountsUnder(n.dir); len(m) > 0 {
		left = append(left, fmt.Sprintf("%s: mounts %v", n.c.Name, m))
	}
	if hs, err := cgroupHierarchies(); err == nil {
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h, n.cgroup)); err == nil {
				left = append(left, fmt.Sprintf("%s: cgroup %s", n.c.Name, filepath.Join(h, n.cgroup)))
			}
		}
	}
	if pids := shims(n.sock); len(pids) > 0 {
		left = append(left, fmt.Sprintf("%s: containerd shims %v", n.c.Name, pids))
	}
	return left
}

// save writes what release must put back to hostStatePath: one line per
// sysctl ("sysctl PATH VALUE") and per path to remove ("remove PATH").
func (h *hostState) save() error {
	var b strings.Builder
	for k, v := range h.sysctls {
		fmt.Fprintf(&b, "sysctl %s %s\n", k, v)
	}
	for _, p := range h.absent {
		fmt.Fprintf(&b, "remove %s\n", p)
	}
	return os.WriteFile(hostStatePath, []byte(b.String()), 0o644)
}

// sweepDeadRealNodes puts back what real nodes of a killed run left: their
// containers and shims, cgroups, mounts, pod network namespaces, and the
// sysctls and paths its hostStatePath names. It runs under the host lock,
// so nothing it finds belongs to a live run.
func sweepDeadRealNodes() {
	tmp := filepath.Join(os.TempDir(), "mcmirror-e2e-")
	// Containers first: the cgroups of dead runs (named /mcm<pid>-<cluster>)
	// hold every process of their pods.
	if hs, err := cgroupHierarchies(); err == nil && len(hs) > 0 {
		if entries, err := os.ReadDir(hs[0]); err == nil {
			for _, e := range entries {
				if deadRun(e.Name()) {
					_ = removeCgroup("/" + e.Name())
				}
			}
		}
	}
	for _, pid := range shimsWhere(func(addr string) bool { return strings.HasPrefix(addr, tmp) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if mounts, err := mountsUnder(strings.TrimSuffix(os.TempDir(), "/")); err == nil {
		for _, m := range mounts {
			if strings.HasPrefix(m, tmp) {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
	}
	// Pod network namespaces that containerd made and no process is in.
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "cni-") {
				if out, err := exec.Command("ip", "netns", "pids", e.Name()).Output(); err == nil && len(bytes.TrimSpace(out)) == 0 {
					_ = ip("netns", "del", e.Name())
				}
			}
		}
	}
	b, err := os.ReadFile(hostStatePath)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "sysctl":
			_ = os.WriteFile(filepath.Join("/proc/sys", f[1]), []byte(f[2]), 0o644)
		case len(f) == 2 && f[0] == "remove":
			_ = unmountUnder(f[1])
			_ = os.RemoveAll(f[1])
		}
	}
	_ = os.Remove(hostStatePath)
}

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stop takes the node down and leaves nothing of it on the host: the
// kubelet first (so that it starts nothing again), then every pod sandbox
// through containerd's CRI (which stops the containers, releases their
// addresses and removes their network namespaces), then containerd, the
// shims it left, whatever process is left in the node's cgroups, and every
// mount under the node's directory.
func (n *realNode) stop() error {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	var errs []error
	if n.containerd != nil {
		if done, _ := n.containerd.Exited(); !done {
			if err := n.removeSandboxes(); err != nil {
				errs = append(errs, err)
			}
		}
		n.containerd.Stop()
	}
	if err := killShims(n.sock); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroup(n.cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(n.dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeContainerLogLinks(n.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: node teardown: %w", n.c.Name, errors.Join(errs...))
	}
	return nil
}

// removeSandboxes stops and removes every pod sandbox of containerd.
func (n *realNode) removeSandboxes() error {
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox of %s/%s: %w", sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox of %s/%s: %w", sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// shims lists the containerd shims that serve the containerd at sock.
func shims(sock string) []int {
	return shimsWhere(func(addr string) bool { return addr == sock })
}

// shimsWhere lists the containerd shims whose containerd address matches.
func shimsWhere(match func(addr string) bool) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && match(args[i+1]) && alive(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killShims kills the containerd shims that serve the containerd at sock:
// a shim outlives its containerd by design.
func killShims(sock string) error {
	pids := shims(sock)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("containerd shim %d still running", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// removeContainerLogLinks removes the links of /var/log/containers that
// point into dir: the kubelet writes them there whatever its flags say.
func removeContainerLogLinks(dir string) error {
	entries, err := os.ReadDir("/var/log/containers")
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

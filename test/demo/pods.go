package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
)

// runPods is the walkthrough on real nodes (`make demo-pods`): clusters
// east and west, each with a node of real parts (containerd, runc, the
// kubelet, CNI, kube-proxy) and kubeadm's CoreDNS; mcmirror installed on
// both from the project's image as deploy/README.md says, step by step;
// StatefulSet nginx-set exported by both; then lines to paste that run in
// east's client pod with kubectl exec.
func runPods(ctx context.Context, w io.Writer, ready func(printed string) error) error {
	imgs, err := harness.LocalImages()
	if err != nil {
		return err
	}
	env := harness.New(harness.Options{Clusters: []harness.ClusterOptions{
		{Name: "east", RealNode: true}, {Name: "west", RealNode: true},
	}})
	defer env.Stop()
	start := time.Now()
	step(w, "starting clusters east and west: API servers, controller manager, scheduler, and a real node each (containerd, runc, kubelet, CNI bridge, kube-proxy)")
	// Real nodes may first wait for the host lock while another
	// environment's run (a test package's) ends.
	startCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	if err := env.Start(startCtx); err != nil {
		return err
	}
	for _, c := range env.Clusters() {
		step(w, c.Name+": kubeadm's CoreDNS")
		if err := c.InstallKubeadmDNS(ctx); err != nil {
			return err
		}
	}
	step(w, fmt.Sprintf("clusters up in %.1fs; installing mcmirror on both as deploy/README.md says (Install, step by step: about 4 minutes)", time.Since(start).Seconds()))
	if log, err := env.InstallFromREADME(ctx); err != nil {
		return fmt.Errorf("%w\n%s", err, log)
	}
	east, west := env.Cluster("east"), env.Cluster("west")
	for _, c := range env.Clusters() {
		if err := c.Apply(ctx, harness.PeerSet(c.Name, imgs.Busybox)); err != nil {
			return err
		}
	}
	if err := east.Apply(ctx, harness.BusyboxClient(imgs.Busybox)); err != nil {
		return err
	}
	step(w, "waiting until east's client pod reaches nginx-set-0 of west by name")
	kubectl, err := harness.Binary("kubectl")
	if err != nil {
		return err
	}
	inPod := fmt.Sprintf("%s --kubeconfig %s exec client -- ", kubectl, east.Kubeconfig)
	waitCtx, cancel2 := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel2()
	for {
		out, err := east.Kubectl(waitCtx, "exec", "client", "--", "sh", "-c", "timeout 10 wget -qO- http://nginx-set-0.nginx-svc-west/")
		if err == nil && strings.TrimSpace(out) == harness.Identity("west", "default", "nginx-set-0") {
			break
		}
		select {
		case <-waitCtx.Done():
			return fmt.Errorf("east's client never reached nginx-set-0.nginx-svc-west (last: %q, %v; logs in %s)", out, err, filepath.Join(env.Dir, "logs"))
		case <-time.After(time.Second):
		}
	}

	var b strings.Builder
	out := io.MultiWriter(w, &b)
	step(out, fmt.Sprintf("ready in %.1fs. From east's client pod (a real container; kubectl exec), by name:", time.Since(start).Seconds()))
	for _, line := range []string{
		inPod + "wget -qO- http://nginx-set-0.nginx-svc-west/",
		inPod + "wget -qO- http://nginx-set-2.nginx-svc-west.default.svc.cluster.local/",
		inPod + "sh -c 'echo hello-over-tcp | nc nginx-set-1.nginx-svc-west 7000'",
		inPod + "nslookup -type=SRV _http._tcp.nginx-svc-global.default.svc.cluster.local | grep -o 'nginx-set-.*' | sort",
	} {
		fmt.Fprintf(out, "\n$ %s\n", line)
		res, err := exec.CommandContext(ctx, "sh", "-c", line).CombinedOutput()
		out.Write(res)
		if err != nil {
			return fmt.Errorf("%s: %w", line, err)
		}
	}
	fmt.Fprintf(out, "\nEach went through east's cluster DNS pods (coredns-mc), kube-proxy, east's gateway pods and, over mTLS, west's gateway pods to the pod.\n")
	fmt.Fprintf(w, "\nKubeconfigs (e.g. %s --kubeconfig %s get pods -A):\n", kubectl, west.Kubeconfig)
	for _, c := range env.Clusters() {
		fmt.Fprintf(w, "  %-6s %s\n", c.Name, c.Kubeconfig)
	}
	fmt.Fprintf(w, "Logs: %s\n", filepath.Join(env.Dir, "logs"))
	return ready(b.String())
}

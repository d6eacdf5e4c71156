// Command demo runs mcmirror on this machine, with real bytes: clusters
// east, west and paris, each with a data plane (a node network namespace
// with kube-proxy, pods that run servers), StatefulSet nginx-set exported by
// each, east linked to west and paris with `coredns-mc link`, and for east
// the cluster DNS, the mirror controller and the gateway, with the
// gateways of west and paris. Once all nine peers answer, it prints lines
// to paste: curl from east's client pod by name to single remote pods, dig,
// and how to export another Service and reach it. It runs until
// interrupted. `make demo` runs it; `make demo-pods` (-pods) runs the
// walkthrough on real nodes instead (pods.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

var clusters = []string{"east", "west", "paris"}

// linkNamespace is where east keeps its link Secrets.
const linkNamespace = "mcmirror-links"

func main() {
	harness.ServeRoleIfAsked() // the demo's pods are this program, re-executed
	check := flag.Bool("check", false, "stop once the lines are printed instead of waiting for Ctrl-C")
	pods := flag.Bool("pods", false, "the walkthrough on real nodes: mcmirror installed from its image and deploy/, as pods")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	demo := run
	if *pods {
		demo = runPods
	}
	err := demo(ctx, os.Stdout, func(string) error {
		if *check {
			return nil
		}
		fmt.Println("\nCtrl-C stops everything.")
		<-ctx.Done()
		step(os.Stdout, "stopping")
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// run starts everything, prints the lines, and calls ready with what it
// printed after the "ready" step; everything stops when ready returns.
func run(ctx context.Context, w io.Writer, ready func(printed string) error) error {
	bin, err := harness.CorednsMC()
	if err != nil {
		return err
	}
	var opts []harness.ClusterOptions
	for _, c := range clusters {
		opts = append(opts, harness.ClusterOptions{Name: c, DataPlane: true})
	}
	env := harness.New(harness.Options{Clusters: opts})
	defer env.Stop()
	start := time.Now()
	step(w, "starting clusters east, west and paris: API servers, kube-controller-manager, KWOK, and kube-proxy in a node namespace each")
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := env.Start(startCtx); err != nil {
		return err
	}
	east, west := env.Cluster("east"), env.Cluster("west")
	for _, c := range env.Clusters() {
		if err := c.Apply(ctx, nginx()); err != nil {
			return err
		}
	}
	// web is west's second StatefulSet, not exported: the lines show how
	// to export it.
	if err := west.Apply(ctx, harness.StatefulSetWithPorts("default", "web", "web", 2, nil,
		harness.ContainerPort{Name: "http", Port: 80})); err != nil {
		return err
	}
	if err := east.Apply(ctx, harness.ClientPod("default", "client")+harness.Namespace(linkNamespace)); err != nil {
		return err
	}
	step(w, fmt.Sprintf("clusters up in %.1fs; each runs StatefulSet nginx-set (3 pods) behind headless nginx-svc, exported", time.Since(start).Seconds()))

	for _, name := range []string{"west", "paris"} {
		step(w, "linking east to "+name+": coredns-mc link --cluster "+name)
		cmd := exec.CommandContext(ctx, bin, "link", "--cluster", name,
			"--kubeconfig", env.Cluster(name).Kubeconfig,
			"--source-cluster", "east", "--source-kubeconfig", east.Kubeconfig,
			"--link-namespace", linkNamespace)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("coredns-mc link %s: %w: %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	step(w, "starting, for east, the cluster DNS, the mirror controller and the gateway egress; and west's and paris's gateway ingress")
	fleet, err := env.LaunchFleet(ctx, harness.FleetOptions{Local: "east", Remotes: []string{"west", "paris"}, LinkSecrets: linkNamespace})
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(env.Dir, "logs"))
	}
	step(w, "waiting until east's client pod reaches all nine nginx-set peers (3 in each cluster) found by SRV")
	if err := waitPeers(ctx, east, 9); err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(env.Dir, "logs"))
	}

	netns, _ := east.PodNetns("default", "client")
	var b strings.Builder
	out := io.MultiWriter(w, &b)
	step(out, fmt.Sprintf("ready in %.1fs. From east's client pod (its network namespace, its resolv.conf), by name:", time.Since(start).Seconds()))
	inPod := "ip netns exec " + netns + " "
	dnsHost := fleet.DNS.Addr[:strings.LastIndexByte(fleet.DNS.Addr, ':')]
	for _, line := range []string{
		inPod + "curl -s http://nginx-set-0.nginx-svc-west/",
		inPod + "curl -s http://nginx-set-2.nginx-svc-paris.default.svc.cluster.local/",
		"dig @" + dnsHost + " +short nginx-set-0.nginx-svc-west.default.svc.cluster.local",
		"dig @" + dnsHost + " +short SRV _http._tcp.nginx-svc-global.default.svc.cluster.local | sort",
	} {
		fmt.Fprintf(out, "\n$ %s\n", line)
		res, err := exec.CommandContext(ctx, "sh", "-c", line).CombinedOutput()
		out.Write(res)
		if err != nil {
			return fmt.Errorf("%s: %w", line, err)
		}
	}
	fmt.Fprintf(out, "\nThe curl lines went through east's cluster DNS (%s, kube-dns), kube-proxy, east's gateway and, over mTLS, the remote gateway to the pod. dig's addresses are east's mirror ClusterIPs (%s).\n",
		east.DNSServiceIP(), east.ServiceCIDR)

	kubectl, err := harness.Binary("kubectl")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nExport west's Service web (StatefulSet web, 2 pods) and reach its pod web-0 from east:\n")
	fmt.Fprintf(out, "\n$ %s --kubeconfig %s label service web %s=%s\nservice/web labeled\n", kubectl, west.Kubeconfig, labels.Exported, labels.ExportGateway)
	fmt.Fprintf(out, "\n$ timeout 60 sh -c 'until %scurl -sf http://web-0.web-west/; do sleep 1; done'\n%s\n",
		inPod, harness.Identity("west", "default", "web-0"))
	fmt.Fprintf(w, "\nKubeconfigs (e.g. %s --kubeconfig %s get services -l mirror.linkerd.io/mirrored-service=true):\n", kubectl, east.Kubeconfig)
	for _, c := range env.Clusters() {
		fmt.Fprintf(w, "  %-6s %s\n", c.Name, c.Kubeconfig)
	}
	fmt.Fprintf(w, "Logs: %s\n", filepath.Join(env.Dir, "logs"))
	return ready(b.String())
}

// nginx is the exported StatefulSet: HTTP on port 80, a TCP echo on 7.
func nginx() string {
	return harness.StatefulSetWithPorts("default", "nginx-svc", "nginx-set", 3,
		map[string]string{labels.Exported: labels.ExportGateway},
		harness.ContainerPort{Name: "http", Port: 80}, harness.ContainerPort{Name: "echo", Port: 7})
}

// waitPeers waits until the peer finder in east's client pod reaches n
// peers.
func waitPeers(ctx context.Context, east *harness.Cluster, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last string
	for {
		peers, err := east.FindPeers(ctx, "default", "client", "_http._tcp.nginx-svc-global.default.svc.cluster.local")
		if err == nil && len(peers) == n {
			return nil
		}
		last = fmt.Sprintf("%d peers, %v", len(peers), err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("not all %d peers reached within 2 minutes (last: %s)", n, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func step(w io.Writer, s string) { fmt.Fprintf(w, "==> %s\n", s) }

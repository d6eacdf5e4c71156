// Command demo runs mcmirror on this machine: clusters east, west and paris
// (real API servers, KWOK pods), a StatefulSet exported by each, the mirror
// controller and coredns-mc for east, and then the dig lines that reach
// west's and paris's pods from east. It runs until interrupted. `make demo`
// runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/mcmirror/mcmirror/test/harness"
)

// nginx is an exported StatefulSet behind a headless Service.
var nginx = harness.StatefulSet("default", "nginx-svc", "nginx-set", 3,
	map[string]string{"mirror.linkerd.io/exported": "true"})

const corefile = `. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:%[3]d
    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster east
        kubeconfig %[1]s
%[2]s        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[1]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`

func main() {
	port := flag.Int("dns-port", 1053, "port of the demo's DNS server on 127.0.0.1")
	check := flag.Bool("check", false, "stop after the dig lines instead of waiting for Ctrl-C")
	flag.Parse()
	if err := run(*port, *check); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(dnsPort int, check bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin, err := harness.CorednsMC()
	if err != nil {
		return err
	}

	env := harness.New(harness.Options{Clusters: []harness.ClusterOptions{
		{Name: "east", Workloads: true},
		{Name: "west", Workloads: true},
		{Name: "paris", Workloads: true},
	}})
	defer env.Stop()
	start := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	step("starting clusters east, west and paris")
	if err := env.Start(startCtx); err != nil {
		return err
	}
	east := env.Cluster("east")
	var links, flags []string
	for _, c := range env.Clusters() {
		if err := c.Apply(ctx, nginx); err != nil {
			return err
		}
		if c == east {
			continue
		}
		kc, err := c.LinkKubeconfig(ctx)
		if err != nil {
			return err
		}
		path := filepath.Join(env.Dir, c.Name+"-link.kubeconfig")
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			return err
		}
		links = append(links, fmt.Sprintf("        link %s %s\n", c.Name, path))
		flags = append(flags, "--link", c.Name+"="+path)
	}
	step(fmt.Sprintf("clusters up in %.1fs; each exports StatefulSet nginx-set (3 pods) behind headless nginx-svc", time.Since(start).Seconds()))

	step("starting the mirror controller for east")
	if _, err := env.Launch("east/controller", nil, append([]string{bin, "controller",
		"--kubeconfig", east.Kubeconfig, "--cluster", "east",
		// The gateway egress the mirrors point at; traffic is not part of
		// this demo.
		"--egress-address", "10.255.0.1", "--egress-ports", "30000-30999",
		"--metrics-addr", "127.0.0.1:0"}, flags...)...); err != nil {
		return err
	}

	step("starting coredns-mc for east")
	readyPort, err := freePort()
	if err != nil {
		return err
	}
	cf := filepath.Join(env.Dir, "Corefile")
	if err := os.WriteFile(cf, fmt.Appendf(nil, corefile, east.Kubeconfig, strings.Join(links, ""), readyPort), 0o644); err != nil {
		return err
	}
	if _, err := env.Launch("east/coredns-mc", nil, bin, "-conf", cf, "-dns.port", strconv.Itoa(dnsPort)); err != nil {
		return err
	}
	server := net.JoinHostPort("127.0.0.1", strconv.Itoa(dnsPort))
	if err := waitFor(ctx, server, "nginx-set-2.nginx-svc-paris.default.svc.cluster.local.", dns.TypeA); err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(env.Dir, "logs"))
	}
	if err := waitFor(ctx, server, "nginx-set-2.nginx-svc-west.default.svc.cluster.local.", dns.TypeA); err != nil {
		return fmt.Errorf("%w (logs in %s)", err, filepath.Join(env.Dir, "logs"))
	}

	step("ready. From cluster east:")
	p := strconv.Itoa(dnsPort)
	for _, args := range [][]string{
		{"+short", "nginx-set-0.nginx-svc-west.default.svc.cluster.local"},
		{"+short", "nginx-svc-paris.default.svc.cluster.local"},
		{"+short", "SRV", "_http._tcp.nginx-svc-global.default.svc.cluster.local"},
	} {
		argv := append([]string{"@127.0.0.1", "-p", p}, args...)
		fmt.Printf("\n$ dig %s\n", strings.Join(argv, " "))
		out, err := exec.CommandContext(ctx, "dig", argv...).CombinedOutput()
		os.Stdout.Write(out)
		if err != nil {
			return fmt.Errorf("dig: %w", err)
		}
	}
	fmt.Printf("\nThe addresses are east's mirror ClusterIPs (%s), made by the controller.\n", east.ServiceCIDR)
	kubectl, err := harness.Binary("kubectl")
	if err != nil {
		return err
	}
	fmt.Printf("\nKubeconfigs, e.g. for the mirrors the controller made in east:\n")
	fmt.Printf("  %s --kubeconfig %s get services -l mirror.linkerd.io/mirrored-service=true\n", kubectl, east.Kubeconfig)
	for _, c := range env.Clusters() {
		fmt.Printf("  %-6s %s\n", c.Name, c.Kubeconfig)
	}
	fmt.Printf("Logs: %s\n", filepath.Join(env.Dir, "logs"))
	if check {
		return nil
	}
	fmt.Printf("\nTry more dig lines against 127.0.0.1 -p %d; Ctrl-C stops everything.\n", dnsPort)
	<-ctx.Done()
	step("stopping")
	return nil
}

// waitFor waits until server answers name with at least one record.
func waitFor(ctx context.Context, server, name string, qtype uint16) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	for {
		if r, _, err := c.ExchangeContext(ctx, m, server); err == nil && len(r.Answer) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer for %s from %s", name, server)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func step(s string) { fmt.Printf("==> %s\n", s) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

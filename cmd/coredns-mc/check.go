package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/check"

	"k8s.io/client-go/kubernetes"
)

func init() {
	subcommands["check"] = func(args []string) int { return runCheck(args, os.Stdout, os.Stderr) }
}

const checkUsage = `usage: coredns-mc check [--kubeconfig FILE] [--context CTX] [-o text|json] [--dns-server HOST:PORT] [flags]

Checks mcmirror as installed in a cluster (deploy/*.yaml or the Helm chart):
the RBAC of each part, the cluster DNS answering a mirror name, the link
Secrets, the peers' gateways and certificates, the egress ports, the
controller's leader and the parts' images. One line per check, ok, warn or
fail, with a fix under each that is not ok. Exit code 1 when a check
fails, 2 for a mistake in the command line. See deploy/check.md.

Flags:`

// runCheck runs `coredns-mc check`.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("coredns-mc check", flag.ContinueOnError)
	var (
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig of the cluster to check (default: $KUBECONFIG or ~/.kube/config)")
		kubeCtx    = fs.String("context", "", "context in the kubeconfig (default: its current context)")
		output     = fs.String("o", "text", "output: text, or json (deploy/check.md describes its fields)")
		dnsServer  = fs.String("dns-server", "", "HOST:PORT where this machine reaches the cluster DNS (default: port-forward to a kube-dns pod's TCP 53)")
		gatewayCA  = fs.String("gateway-ca", "", "PEM file of the gateways' trust root (default: ca.crt of the gateway's certificate Secret)")
		timeout    = fs.Duration("timeout", 10*time.Second, "bound on each check's calls and dials")
	)
	fs.StringVar(output, "output", "text", "same as -o")
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "coredns-mc check: "+format+"\n", a...)
		return 2
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, checkUsage)
			fs.PrintDefaults()
			return 0
		}
		return usage("%v (-h lists the flags)", err)
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected arguments %q", fs.Args())
	case *output != "text" && *output != "json":
		return usage("-o %q: want text or json", *output)
	case *timeout <= 0:
		return usage("--timeout must be positive")
	}
	if *dnsServer != "" {
		if _, _, err := net.SplitHostPort(*dnsServer); err != nil {
			return usage("--dns-server %q: want HOST:PORT (%v)", *dnsServer, err)
		}
	}
	opts := check.Options{DNSServer: *dnsServer, Timeout: *timeout}
	if *gatewayCA != "" {
		pem, err := os.ReadFile(*gatewayCA)
		if err != nil {
			return usage("--gateway-ca: %v", err)
		}
		opts.GatewayCA, opts.GatewayCAFrom = pem, *gatewayCA+" (--gateway-ca)"
	}
	c, err := loadCluster("cluster", *kubeconfig, *kubeCtx, "--kubeconfig", "--context")
	if err != nil {
		return usage("%v", err)
	}
	// A run is a burst of some fifty requests (one access review per
	// permission), which client-go's default 5 per second would spread
	// over ten seconds.
	c.config.QPS, c.config.Burst = 100, 200
	if opts.Client, err = kubernetes.NewForConfig(c.config); err != nil {
		return usage("%v", err)
	}
	opts.Config = c.config

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report := check.Run(ctx, opts)
	if *output == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "coredns-mc check: %v\n", err)
		return 1
	}
	return report.ExitCode()
}

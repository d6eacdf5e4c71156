package main

import (
	"context"
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
	"k8s.io/client-go/rest"
)

func init() {
	subcommands["check"] = func(args []string) int { return runCheck(args, os.Stdout, os.Stderr) }
}

const checkUsage = `usage: coredns-mc check [--kubeconfig FILE] [--context CTX] [-o text|json] [--dns-server HOST:PORT] [flags]
       coredns-mc check CONTEXT CONTEXT... [--topology mesh|hub=C|A->B,...] [--cluster-name CONTEXT=NAME] [-o text|json] [flags]

Checks mcmirror as installed in a cluster (deploy/*.yaml or the Helm chart):
the RBAC of each part, the cluster DNS answering a mirror name, the link
Secrets, the peers' gateways and certificates, the egress ports, the
controller's leader and the parts' images. One line per check, ok, warn or
fail, with a fix under each that is not ok. Exit code 1 when a check
fails, 2 for a mistake in the command line. See deploy/check.md.

With a list of contexts (of --kubeconfig, or the default kubeconfig), checks
every pair of --topology (default: the full mesh) as its source cluster sees
it: one line per pair, whether a link Secret links the target and works
from here, how many of the source's DNS replicas have synced the link, how
long ago one last heard from the target, and whether the source's gateway
reaches the target's (gateway mode). Each problem follows with its fix;
exit code 1 when a pair fails.

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
	var fc fleetFlags
	fc.addFlags(fs, "check")
	c := &cli{name: "check", stdout: stdout, stderr: stderr}
	contexts, code, ok := c.parseFlags(fs, args, checkUsage, true)
	if !ok {
		return code
	}
	switch {
	case len(contexts) == 1:
		return c.usage("unexpected arguments %q: give --context for one cluster, or two contexts or more for a fleet", contexts)
	case *output != "text" && *output != "json":
		return c.usage("-o %q: want text or json", *output)
	case *timeout <= 0:
		return c.usage("--timeout must be positive")
	}
	if len(contexts) > 0 {
		return runFleetCheck(c, fs, &fc, contexts, *kubeconfig, check.Options{Timeout: *timeout}, *output == "json")
	}
	if msg := onlyWithList(fs, "cluster-name", "topology"); msg != "" {
		return c.usage("%s", msg)
	}
	if *dnsServer != "" {
		if _, _, err := net.SplitHostPort(*dnsServer); err != nil {
			return c.usage("--dns-server %q: want HOST:PORT (%v)", *dnsServer, err)
		}
	}
	opts := check.Options{DNSServer: *dnsServer, Timeout: *timeout}
	if *gatewayCA != "" {
		pem, err := os.ReadFile(*gatewayCA)
		if err != nil {
			return c.usage("--gateway-ca: %v", err)
		}
		opts.GatewayCA, opts.GatewayCAFrom = pem, *gatewayCA+" (--gateway-ca)"
	}
	cl, err := loadCluster("cluster", *kubeconfig, *kubeCtx, "--kubeconfig", "--context")
	if err != nil {
		return c.usage("%v", err)
	}
	if opts.Client, opts.Config, err = cl.checkClient(); err != nil {
		return c.usage("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return writeReport(check.Run(ctx, opts), *output == "json", stdout, stderr)
}

// checkClient is a client of cl for the checks. A run is a burst of some
// fifty requests (one access review per permission), which client-go's
// default 5 per second would spread over ten seconds.
func (cl *cluster) checkClient() (kubernetes.Interface, *rest.Config, error) {
	cl.config.QPS, cl.config.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cl.config)
	return client, cl.config, err
}

// report is what a run of check writes: the report of one cluster, or of
// a fleet.
type report interface {
	WriteJSON(io.Writer) error
	WriteText(io.Writer) error
	ExitCode() int
}

// writeReport writes r as JSON or text and returns the exit code.
func writeReport(r report, json bool, stdout, stderr io.Writer) int {
	write := r.WriteText
	if json {
		write = r.WriteJSON
	}
	if err := write(stdout); err != nil {
		fmt.Fprintf(stderr, "coredns-mc check: %v\n", err)
		return 1
	}
	return r.ExitCode()
}

// Command coredns-mc is CoreDNS with every standard plugin and mcmirror, the
// multi-cluster plugin, in one binary. Subcommands run mcmirror's other
// parts:
//
//	coredns-mc [coredns flags]        the DNS server
//	coredns-mc controller [flags]     the mirror controller
//	coredns-mc gateway [flags]        the gateway: egress and ingress
//	coredns-mc link [flags]           grant a cluster's read access and make the link Secret
//	coredns-mc link CONTEXT... [flags]   link every pair of a fleet: the full mesh, or a --topology
//	coredns-mc unlink [flags]         remove a link from both clusters, or every pair of a fleet
//	coredns-mc dns ACTION [flags]     patch the cluster's CoreDNS into coredns-mc (apply), or put it back (revert)
//	coredns-mc check [flags]          say what is wrong with mcmirror in a cluster, and how to fix it
//	coredns-mc check CONTEXT... [flags]  one line per pair of a fleet: linked, synced, last change, gateway
//	coredns-mc certs STEP [flags]     make the gateways' root, a cluster's intermediate, a gateway certificate
package main

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/KimMachineGun/automemlimit/memlimit"
	_ "github.com/coredns/coredns/core/plugin" // the standard plugins
	"github.com/coredns/coredns/coremain"
)

// subcommands maps a first argument to the part of mcmirror it runs; each
// part registers itself from its own file's init. The function returns the
// exit code.
var subcommands = map[string]func(args []string) int{}

func main() {
	setMemoryLimit()
	if len(os.Args) > 1 {
		if run, ok := subcommands[os.Args[1]]; ok {
			os.Exit(run(os.Args[2:]))
		}
		if os.Args[1] == "help" {
			usage()
			return
		}
	}
	if versionFlag(os.Args[1:]) {
		printVersion(os.Stdout)
		return
	}
	coremain.Run()
}

// setMemoryLimit gives the Go runtime the memory limit of the process's
// cgroup (a container's limits.memory, cgroup v2 or v1), so that the heap
// is collected harder as it nears the limit instead of growing to twice
// what is live (a relist decodes whole lists) and the kernel killing the
// process. The environment wins: GOMEMLIMIT set (as the chart sets it for
// the controller, the gateway and mcmirror-dns) leaves the runtime as it
// is, and so does AUTOMEMLIMIT=off; AUTOMEMLIMIT=0.9 takes that share of
// the cgroup's limit. Without a limit (no container, or none set) nothing
// changes. Every part of mcmirror does this, the DNS server above all: a
// replaced CoreDNS keeps its own environment, which has no GOMEMLIMIT.
func setMemoryLimit() {
	if _, err := memlimit.Set(memlimit.WithRatio(1), memlimit.WithProvider(memlimit.FromCgroup)); err != nil {
		fmt.Fprintf(os.Stderr, "coredns-mc: Go's memory limit is left unset: %v\n", err)
	}
}

func usage() {
	fmt.Println("usage: coredns-mc [coredns flags] | coredns-mc SUBCOMMAND [flags]")
	for _, n := range slices.Sorted(maps.Keys(subcommands)) {
		fmt.Println("  " + n)
	}
}

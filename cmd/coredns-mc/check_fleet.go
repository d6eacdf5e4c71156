package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mcmirror/mcmirror/internal/check"
	"github.com/mcmirror/mcmirror/internal/fleet"

	"k8s.io/client-go/kubernetes"
)

// checkParallel bounds the clusters checked at once; each checks its own
// links side by side.
const checkParallel = 8

// fleetCheck is `coredns-mc check` over a list of contexts.
type fleetCheck struct {
	names    fleet.Assignments
	topology string
}

func (fc *fleetCheck) addFlags(fs *flag.FlagSet) {
	fs.Var(&fc.names, "cluster-name", "with a list of contexts: CONTEXT=NAME names the cluster of that context (default: the context's name); once per context to rename")
	fs.StringVar(&fc.topology, "topology", "mesh", "with a list of contexts, "+fleet.TopologyHelp)
}

// onlyWithList says which flag of a fleet was given without a list of
// contexts, if one was.
func (fc *fleetCheck) onlyWithList(fs *flag.FlagSet) string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "cluster-name" || f.Name == "topology" {
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s goes with a list of contexts (coredns-mc check CONTEXT CONTEXT... %s ...)", strings.Join(set, ", "), set[0])
}

// run checks every pair of the fleet of contexts from its source's side,
// writes one report, and returns the exit code.
func (fc *fleetCheck) run(fs *flag.FlagSet, contexts []string, kubeconfig string, opts check.Options, json bool, stdout, stderr io.Writer, usage func(string, ...any) int) int {
	var single []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "context" || f.Name == "dns-server" || f.Name == "gateway-ca" {
			single = append(single, "--"+f.Name)
		}
	})
	if len(single) > 0 {
		return usage("%s goes with one cluster, not with a list of contexts (%s)", strings.Join(single, ", "), strings.Join(contexts, " "))
	}
	members, err := fleet.Members(contexts, fc.names.Values)
	if err != nil {
		return usage("%v", err)
	}
	pairs, err := fleet.Pairs(members, fc.topology)
	if err != nil {
		return usage("%v", err)
	}
	// Each pair is judged from its source: only sources are read.
	var sources []fleet.Member
	seen := map[string]bool{}
	for _, p := range pairs {
		if !seen[p.Source.Context] {
			seen[p.Source.Context] = true
			sources = append(sources, p.Source)
		}
	}
	servers := map[string]string{}
	clients := map[string]check.Options{}
	for _, m := range members {
		c, err := loadCluster("cluster "+m.Name, kubeconfig, m.Context, "--kubeconfig", "context")
		if err != nil {
			return usage("%v", err)
		}
		servers[m.Context] = c.config.Host
		// As check of one cluster: a burst of access reviews and probes.
		c.config.QPS, c.config.Burst = 100, 200
		o := opts
		if o.Client, err = kubernetes.NewForConfig(c.config); err != nil {
			return usage("%v", err)
		}
		o.Config = c.config
		clients[m.Context] = o
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	facts := make([]*check.MemberFacts, len(sources))
	fleet.Each(len(sources), checkParallel, func(i int) { facts[i] = check.CollectMember(ctx, clients[sources[i].Context]) })
	byContext := map[string]*check.MemberFacts{}
	for i, m := range sources {
		byContext[m.Context] = facts[i]
	}
	return writeReport(check.NewFleetReport(fc.topology, members, servers, check.EvaluateFleet(pairs, byContext)), json, stdout, stderr)
}

package main

import (
	"context"
	"flag"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mcmirror/mcmirror/internal/check"
	"github.com/mcmirror/mcmirror/internal/fleet"
)

// checkParallel bounds the clusters checked at once; each checks its own
// links side by side.
const checkParallel = 8

// runFleetCheck checks every pair of the fleet of contexts from its
// source's side, writes one report, and returns the exit code.
func runFleetCheck(cl *cli, fs *flag.FlagSet, f *fleetFlags, contexts []string, kubeconfig string, opts check.Options, json bool) int {
	if single := givenFlags(fs, "context", "dns-server", "gateway-ca"); len(single) > 0 {
		return cl.usage("%s goes with one cluster, not with a list of contexts (%s)", strings.Join(single, ", "), strings.Join(contexts, " "))
	}
	if err := f.plan(contexts); err != nil {
		return cl.usage("%v", err)
	}
	// Each pair is judged from its source: only sources are read.
	sources, _ := sides(f.pairs)
	servers := map[string]string{}
	clients := map[string]check.Options{}
	for _, m := range f.members {
		c, err := loadCluster("cluster "+m.Name, kubeconfig, m.Context, "--kubeconfig", "context")
		if err != nil {
			return cl.usage("%v", err)
		}
		servers[m.Context] = c.config.Host
		o := opts
		if o.Client, o.Config, err = c.checkClient(); err != nil {
			return cl.usage("%v", err)
		}
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
	return writeReport(check.NewFleetReport(f.topology, f.members, servers, check.EvaluateFleet(f.pairs, byContext)), json, cl.stdout, cl.stderr)
}

package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mcmirror/mcmirror/internal/fleet"
	"github.com/mcmirror/mcmirror/internal/grant"
)

// fleetUsage says how link or unlink works over a list of contexts.
func fleetUsage(name string) string {
	if name == "unlink" {
		return "With a list of contexts (of --kubeconfig, or the default kubeconfig), removes the links of every pair\n" +
			"of --topology as above; a pair that is not linked is left unchanged. One line per pair on stdout:\n" +
			"unlinked, unchanged or failed; exit code 1 when a pair failed, the others done all the same."
	}
	return "With a list of contexts (of --kubeconfig, or the default kubeconfig), links every pair of --topology\n" +
		"(default: the full mesh, each cluster linking every other): each source cluster gets a token of its own\n" +
		"in each target, and a link Secret applied in the source. Each cluster is named as its context, or by\n" +
		"--cluster-name CONTEXT=NAME. Running it again writes nothing and says so. One line per pair on stdout:\n" +
		"linked, unchanged or failed; exit code 1 when a pair failed, the others done all the same."
}

// fleetFlags are the flags and arguments of link, unlink and check over a
// list of contexts.
type fleetFlags struct {
	// contexts are the arguments: the kubeconfig's contexts of the fleet;
	// nil for one link.
	contexts []string
	// names are --cluster-name CONTEXT=NAME; servers every --api-server,
	// in order (link only).
	names    fleet.Assignments
	servers  stringList
	topology string
	// parallel bounds the pairs worked on at once.
	parallel int

	// members, pairs and apiServers (by context) are computed by
	// parseFleet.
	members    []fleet.Member
	pairs      []fleet.Pair
	apiServers map[string]string

	// mu keeps the lines of pairs worked on side by side whole.
	mu sync.Mutex
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// oneLinkOnly are the flags that name one link, and make no sense with a
// list of contexts.
var oneLinkOnly = []string{"cluster", "context", "source-cluster", "source-context", "source-kubeconfig"}

// addFlags adds the flags of name (link, unlink or check) over a list of
// contexts.
func (f *fleetFlags) addFlags(fs *flag.FlagSet, name string) {
	fs.Var(&f.names, "cluster-name", "with a list of contexts: CONTEXT=NAME names the cluster of that context (default: the context's name); once per context to rename")
	fs.StringVar(&f.topology, "topology", "mesh", "with a list of contexts, "+fleet.TopologyHelp)
	if name == "check" {
		return
	}
	fs.IntVar(&f.parallel, "parallel", 8, "with a list of contexts: how many pairs are worked on at once")
	if name == "link" {
		fs.Var(&f.servers, "api-server", "https URL of the target's API server as the source cluster's pods reach it (default: the kubeconfig's); "+
			"with a list of contexts, CONTEXT=URL, once per context whose pods-facing address differs")
	}
}

// lastServer is --api-server of one link: the last one given.
func (f *fleetFlags) lastServer() string {
	if len(f.servers) == 0 {
		return ""
	}
	return f.servers[len(f.servers)-1]
}

// onlyWithList says which of a fleet's flags (names) was given without a
// list of contexts, if one was.
func onlyWithList(fs *flag.FlagSet, names ...string) string {
	set := givenFlags(fs, names...)
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s goes with a list of contexts (%s CONTEXT CONTEXT... %s ...)", strings.Join(set, ", "), fs.Name(), set[0])
}

// plan computes the members of contexts and their pairs.
func (f *fleetFlags) plan(contexts []string) (err error) {
	if f.members, err = fleet.Members(contexts, f.names.Values); err == nil {
		f.pairs, err = fleet.Pairs(f.members, f.topology)
	}
	return err
}

// parseFleet checks the flags of a run over a list of contexts and computes
// its members and pairs; ok false means exit with code.
func (c *linkCmd) parseFleet(fs *flag.FlagSet, contexts []string) (code int, ok bool) {
	if single := givenFlags(fs, oneLinkOnly...); len(single) > 0 {
		return c.usage("unexpected arguments %q with %s: those flags make one link; a list of contexts links the pairs of a fleet, without them",
			contexts, strings.Join(single, ", ")), false
	}
	f := &c.fleet
	if err := f.plan(contexts); err != nil {
		return c.usage("%v", err), false
	}
	f.apiServers = map[string]string{}
	for _, s := range f.servers {
		var a fleet.Assignments
		if err := a.Set(s); err != nil {
			return c.usage("--api-server %v: with a list of contexts, give CONTEXT=https://HOST[:PORT]", err), false
		}
		ctx, url := a.Keys[0], a.Values[a.Keys[0]]
		switch _, dup := f.apiServers[ctx]; {
		case !slices.Contains(contexts, ctx):
			return c.usage("--api-server %s: context %q is not in the list", s, ctx), false
		case dup:
			return c.usage("--api-server: context %q given twice", ctx), false
		}
		if err := grant.CheckServer(url); err != nil {
			return c.usage("--api-server %s: %v", ctx, err), false
		}
		f.apiServers[ctx] = url
	}
	switch {
	case c.name == "link" && c.tokenTimeout <= 0:
		return c.usage("--token-timeout must be positive"), false
	case f.parallel < 1:
		return c.usage("--parallel must be at least 1"), false
	}
	// The namespaces, with any member's name: the names are checked.
	o := c.opts
	o.Cluster = f.members[0].Name
	if err := o.Validate(); err != nil {
		return c.usage("%v", err), false
	}
	f.contexts = contexts
	return 0, true
}

// runFleet links or unlinks every pair, each on its own: a pair that fails
// does not stop the others. It writes one line per pair and exits 1 when
// any failed.
func (c *linkCmd) runFleet(ctx context.Context) int {
	clusters, err := c.loadFleet()
	if err != nil {
		return c.usage("%v", err)
	}
	do := c.linkFleet
	if c.name == "unlink" {
		do = c.unlinkFleet
	}
	outcomes := do(ctx, clusters)
	if err := fleet.WriteOutcomes(c.stdout, outcomes); err != nil {
		return c.fail(err)
	}
	if n := fleet.FailedCount(outcomes); n > 0 {
		return c.fail(fmt.Errorf("%d of %d pairs failed (the others are done)", n, len(outcomes)))
	}
	return 0
}

// loadFleet loads every member's context; each must reach an API server
// of its own.
func (c *linkCmd) loadFleet() (map[string]*cluster, error) {
	out := map[string]*cluster{}
	byHost := map[string]string{}
	for _, m := range c.fleet.members {
		cl, err := loadCluster("cluster "+m.Name, c.kubeconfig, m.Context, "--kubeconfig", "context")
		if err != nil {
			return nil, err
		}
		host := strings.TrimSuffix(cl.config.Host, "/")
		if other, dup := byHost[host]; dup {
			return nil, fmt.Errorf("contexts %q and %q reach the same API server (%s): a cluster does not link to itself", other, m.Context, host)
		}
		byHost[host] = m.Context
		// Many pairs share each cluster: client-go's default 5 requests
		// per second would queue them.
		cl.config.QPS, cl.config.Burst = 50, 100
		if err := cl.connect(); err != nil {
			return nil, err
		}
		out[m.Context] = cl
	}
	return out, nil
}

// pairOptions are the grant.Options of pair p: the target named as the
// fleet names it, the source too, so that its token is its own.
func (c *linkCmd) pairOptions(p fleet.Pair) grant.Options {
	o := c.opts
	o.Cluster, o.Source = p.Target.Name, p.Source.Name
	return o
}

// reachAll asks every member's API server once, side by side: the error
// of each that does not answer, by context.
func (c *linkCmd) reachAll(ctx context.Context, clusters map[string]*cluster) map[string]error {
	ms := c.fleet.members
	errs := make([]error, len(ms))
	fleet.Each(len(ms), c.fleet.parallel, func(i int) { errs[i] = clusters[ms[i].Context].reach(ctx) })
	out := map[string]error{}
	for i, m := range ms {
		if errs[i] != nil {
			out[m.Context] = errs[i]
		}
	}
	return out
}

// sides returns the distinct sources and targets of pairs, in order.
func sides(pairs []fleet.Pair) (sources, targets []fleet.Member) {
	seen := map[[2]string]bool{}
	for _, p := range pairs {
		if k := [2]string{"s", p.Source.Context}; !seen[k] {
			seen[k] = true
			sources = append(sources, p.Source)
		}
		if k := [2]string{"t", p.Target.Context}; !seen[k] {
			seen[k] = true
			targets = append(targets, p.Target)
		}
	}
	return sources, targets
}

// fleetProgress reports a step of a fleet, on stderr, one whole line at a
// time: pairs are worked on side by side; stdout is for the table.
func (c *linkCmd) fleetProgress(format string, a ...any) {
	c.fleet.mu.Lock()
	defer c.fleet.mu.Unlock()
	c.progress(format, a...)
}

// Package fleet computes what `coredns-mc link`, `unlink` and `check` do
// over a list of clusters: the members (a kubeconfig context each, and the
// name the others give it) and the ordered pairs of a topology, each pair a
// source cluster that links a target cluster. It is pure computation; the
// commands make the API calls.
package fleet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// Member is one cluster of the fleet.
type Member struct {
	// Context is its context in the kubeconfig.
	Context string
	// Name is its cluster name: the suffix of its mirrors in the clusters
	// that link it, and the name its own parts are configured with.
	Name string
}

// String is the name, with the context when they differ: "east (ctx kind-east)".
func (m Member) String() string {
	if m.Context == m.Name {
		return m.Name
	}
	return fmt.Sprintf("%s (context %s)", m.Name, m.Context)
}

// Pair is one link: Source links Target, so that Source's DNS answers
// Target's names.
type Pair struct {
	Source, Target Member
}

// String is "source->target", by cluster names.
func (p Pair) String() string { return p.Source.Name + "->" + p.Target.Name }

// Assignments is a flag that may be given several times, each time
// KEY=VALUE: --cluster-name CTX=NAME, --api-server CTX=URL.
type Assignments struct {
	// Keys in the order given; Values by key.
	Keys   []string
	Values map[string]string
}

// String lists the assignments, as flag.Value wants.
func (a *Assignments) String() string {
	if a == nil {
		return ""
	}
	var parts []string
	for _, k := range a.Keys {
		parts = append(parts, k+"="+a.Values[k])
	}
	return strings.Join(parts, ",")
}

// Set takes one KEY=VALUE; a key given twice is a mistake.
func (a *Assignments) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q: want CONTEXT=VALUE", s)
	}
	if a.Values == nil {
		a.Values = map[string]string{}
	}
	if old, dup := a.Values[k]; dup {
		return fmt.Errorf("%s given twice (%s and %s)", k, old, v)
	}
	a.Keys = append(a.Keys, k)
	a.Values[k] = v
	return nil
}

// Members returns the members of the fleet of contexts: each named by
// names[context], or else by its context, as labels.ValidateClusterName
// allows. A context listed twice, two members of one name, and a name for
// a context not listed are mistakes.
func Members(contexts []string, names map[string]string) ([]Member, error) {
	if len(contexts) < 2 {
		return nil, fmt.Errorf("a fleet takes two contexts or more, not %d", len(contexts))
	}
	var out []Member
	byName := map[string]string{}
	for _, ctx := range contexts {
		if slices.ContainsFunc(out, func(m Member) bool { return m.Context == ctx }) {
			return nil, fmt.Errorf("context %q listed twice", ctx)
		}
		name, given := names[ctx]
		if !given {
			name = ctx
		}
		if err := labels.ValidateClusterName(name); err != nil {
			if !given {
				return nil, fmt.Errorf("context %q: %v: name it with --cluster-name %s=NAME", ctx, err, ctx)
			}
			return nil, fmt.Errorf("--cluster-name %s=%s: %v", ctx, name, err)
		}
		if other, dup := byName[name]; dup {
			return nil, fmt.Errorf("contexts %q and %q are both named %q: give each a name of its own with --cluster-name CONTEXT=NAME", other, ctx, name)
		}
		byName[name] = ctx
		out = append(out, Member{Context: ctx, Name: name})
	}
	for ctx := range names {
		if !slices.Contains(contexts, ctx) {
			return nil, fmt.Errorf("--cluster-name %s=%s: context %q is not in the list", ctx, names[ctx], ctx)
		}
	}
	return out, nil
}

// TopologyHelp says what Pairs takes, for the commands' usage.
const TopologyHelp = `which pairs: "mesh" (every cluster links every other), "hub=C" (C links every other cluster and each of them links C), ` +
	`or pairs "A->B,C<->D" (A links B; C and D link each other); clusters by context or cluster name`

// Pairs returns the ordered pairs of topology over members, in a stable
// order: members' order by source, then by target.
//
//	mesh (or empty)  every member links every other: n(n-1) pairs
//	hub=C            C links every other member, and each links C
//	A->B,C<->D       A links B; C links D and D links C
//
// A member in no pair is a mistake: it was listed for nothing.
func Pairs(members []Member, topology string) ([]Pair, error) {
	want := map[[2]int]bool{}
	switch t := strings.TrimSpace(topology); {
	case t == "" || t == "mesh":
		for i := range members {
			for j := range members {
				if i != j {
					want[[2]int{i, j}] = true
				}
			}
		}
	case strings.HasPrefix(t, "hub="):
		hub, err := find(members, strings.TrimPrefix(t, "hub="))
		if err != nil {
			return nil, fmt.Errorf("topology %q: %v", topology, err)
		}
		for i := range members {
			if i != hub {
				want[[2]int{hub, i}], want[[2]int{i, hub}] = true, true
			}
		}
	default:
		for _, p := range strings.Split(t, ",") {
			if err := addPair(want, members, strings.TrimSpace(p)); err != nil {
				return nil, fmt.Errorf("topology %q: %v", topology, err)
			}
		}
	}
	var out []Pair
	used := make([]bool, len(members))
	for i := range members {
		for j := range members {
			if want[[2]int{i, j}] {
				out = append(out, Pair{Source: members[i], Target: members[j]})
				used[i], used[j] = true, true
			}
		}
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Errorf("topology %q: context %q is in no pair", topology, members[i].Context)
		}
	}
	return out, nil
}

// addPair adds "A->B" or "A<->B" to want.
func addPair(want map[[2]int]bool, members []Member, p string) error {
	both := strings.Contains(p, "<->")
	sep := "->"
	if both {
		sep = "<->"
	}
	a, b, ok := strings.Cut(p, sep)
	if !ok {
		return fmt.Errorf("%q: want mesh, hub=CLUSTER, or pairs A->B or A<->B separated by commas", p)
	}
	i, err := find(members, strings.TrimSpace(a))
	if err != nil {
		return err
	}
	j, err := find(members, strings.TrimSpace(b))
	if err != nil {
		return err
	}
	if i == j {
		return fmt.Errorf("%q: a cluster does not link itself", p)
	}
	want[[2]int{i, j}] = true
	if both {
		want[[2]int{j, i}] = true
	}
	return nil
}

// find returns the index of the member whose context, or else whose name,
// is s.
func find(members []Member, s string) (int, error) {
	if i := slices.IndexFunc(members, func(m Member) bool { return m.Context == s }); i >= 0 {
		return i, nil
	}
	if i := slices.IndexFunc(members, func(m Member) bool { return m.Name == s }); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("%q is no context or cluster name of the list", s)
}

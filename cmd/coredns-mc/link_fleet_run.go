package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcmirror/mcmirror/internal/fleet"
	"github.com/mcmirror/mcmirror/internal/grant"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// side is what a run found, and did, in one cluster for all its pairs:
// the checks that come before any change, made once per cluster.
type side struct {
	// err is why none of the cluster's pairs can be done: it does not
	// answer, the caller may not, the link namespace is missing.
	err error
	// existing are the link Secrets of a source.
	existing []corev1.Secret
	// ep is where a target is reached, and granted what of its grant a
	// link wrote (empty when it was there already).
	ep      grant.Endpoint
	granted []string
}

// sidesOf runs prepare on each of members side by side, but for those
// down, whose error is their side's.
func (c *linkCmd) sidesOf(members []fleet.Member, down map[string]error, prepare func(fleet.Member) side) map[string]*side {
	out := make([]side, len(members))
	fleet.Each(len(members), c.fleet.parallel, func(i int) {
		if err := down[members[i].Context]; err != nil {
			out[i] = side{err: err}
		} else {
			out[i] = prepare(members[i])
		}
	})
	m := map[string]*side{}
	for i := range members {
		m[members[i].Context] = &out[i]
	}
	return m
}

// linkFleet links every pair. First, once per cluster: every API server
// answers, each target grants the link's access (the ServiceAccount and
// its role) and each source may write link Secrets; then each pair: the
// source's token in the target, and its link Secret in the source.
func (c *linkCmd) linkFleet(ctx context.Context, clusters map[string]*cluster) []fleet.Outcome {
	down := c.reachAll(ctx, clusters)
	sources, targets := sides(c.fleet.pairs)
	ts := c.sidesOf(targets, down, func(m fleet.Member) side { return c.grantTarget(ctx, clusters[m.Context], m) })
	ss := c.sidesOf(sources, down, func(m fleet.Member) side {
		existing, err := clusters[m.Context].linkSecrets(ctx, c.opts, true)
		return side{err: err, existing: existing}
	})
	pairs := c.fleet.pairs
	outs := make([]fleet.Outcome, len(pairs))
	fleet.Each(len(pairs), c.fleet.parallel, func(i int) {
		p := pairs[i]
		detail, unchanged, err := c.linkPair(ctx, p, clusters[p.Source.Context], clusters[p.Target.Context], ss[p.Source.Context], ts[p.Target.Context])
		outs[i] = fleet.Outcome{Pair: p, Result: fleet.Linked, Detail: detail}
		switch {
		case err != nil:
			outs[i].Result, outs[i].Detail = fleet.Failed, err.Error()
		case unchanged:
			outs[i].Result = fleet.Unchanged
		}
		c.fleetProgress("%s: %s", p, outs[i].Result)
	})
	return outs
}

// grantTarget checks that the caller may grant the link's access in
// target m, and applies the ServiceAccount and its role: once, for every
// source.
func (c *linkCmd) grantTarget(ctx context.Context, t *cluster, m fleet.Member) side {
	o := c.opts
	ep, err := t.endpoint(c.fleet.apiServers[m.Context])
	if err != nil {
		return side{err: err}
	}
	if err := t.may(ctx, "grant the link's access", grant.GrantAccess(o)...); err != nil {
		return side{err: err}
	}
	tg := grant.TargetObjects(o)
	s := side{ep: ep}
	for _, obj := range []runtime.Object{tg.Namespace, tg.ServiceAccount, tg.ClusterRole, tg.ClusterRoleBinding} {
		what, err := t.applyTracked(ctx, obj)
		if err != nil {
			return side{err: err}
		}
		if what != "" {
			s.granted = append(s.granted, what+" in "+m.Name)
		}
	}
	return s
}

// linkPair links pair p as one link with --source-cluster does: the
// source's own token in the target, proven to work, and the link Secret in
// the source. It says what it wrote, or that it wrote nothing.
func (c *linkCmd) linkPair(ctx context.Context, p fleet.Pair, source, target *cluster, s, t *side) (detail string, unchanged bool, err error) {
	switch {
	case s.err != nil:
		return "", false, s.err
	case t.err != nil:
		return "", false, t.err
	}
	o := c.pairOptions(p)
	if err := grant.CheckSource(grant.LinkSecret(o, nil), t.ep.Server, s.existing); err != nil {
		return "", false, fmt.Errorf("%s: %w", source, err)
	}
	changes := append([]string(nil), t.granted...)
	what, err := target.applyTracked(ctx, grant.TargetObjects(o).Token)
	if err != nil {
		return "", false, err
	}
	if what != "" {
		changes = append(changes, what+" in "+p.Target.Name)
	}
	token, err := target.waitToken(ctx, o.Namespace, o.TokenName(), c.tokenTimeout)
	if err != nil {
		return "", false, err
	}
	if err := target.checkToken(ctx, token); err != nil {
		return "", false, err
	}
	kc, err := grant.Kubeconfig(o, t.ep, token)
	if err != nil {
		return "", false, err
	}
	secret := grant.LinkSecret(o, kc)
	if what, err = source.applyTracked(ctx, secret); err != nil {
		return "", false, err
	}
	if what != "" {
		changes = append(changes, what+" in "+p.Source.Name)
	}
	if len(changes) == 0 {
		return fmt.Sprintf("already linked: token Secret %s/%s in %s and link Secret %s/%s in %s as wanted, nothing written",
			o.Namespace, o.TokenName(), p.Target.Name, secret.Namespace, secret.Name, p.Source.Name), true, nil
	}
	return strings.Join(changes, "; "), false, nil
}

// unlinkFleet unlinks every pair as unlink does one: the source's link
// Secrets first, then the source's token in the target; then, in each
// target, the ServiceAccount and its role once no token is left.
func (c *linkCmd) unlinkFleet(ctx context.Context, clusters map[string]*cluster) []fleet.Outcome {
	down := c.reachAll(ctx, clusters)
	sources, targets := sides(c.fleet.pairs)
	o := c.opts
	ss := c.sidesOf(sources, down, func(m fleet.Member) side {
		existing, err := clusters[m.Context].linkSecrets(ctx, o, false)
		return side{err: err, existing: existing}
	})
	ts := c.sidesOf(targets, down, func(m fleet.Member) side {
		return side{err: clusters[m.Context].may(ctx, "remove the link's access", grant.RevokeAccess(o)...)}
	})
	pairs := c.fleet.pairs
	outs := make([]fleet.Outcome, len(pairs))
	fleet.Each(len(pairs), c.fleet.parallel, func(i int) {
		p := pairs[i]
		outs[i] = c.unlinkPair(ctx, p, clusters[p.Source.Context], clusters[p.Target.Context], ss[p.Source.Context], ts[p.Target.Context])
		c.fleetProgress("%s: %s", p, outs[i].Result)
	})
	fleet.Each(len(targets), c.fleet.parallel, func(i int) {
		m := targets[i]
		if ts[m.Context].err == nil {
			c.revokeIfLast(ctx, clusters[m.Context], m, outs)
		}
	})
	return outs
}

// unlinkPair deletes the link Secrets of the source that link the target,
// then the source's token in the target. A source that cannot be reached
// keeps its token: its links stop before their credentials do.
func (c *linkCmd) unlinkPair(ctx context.Context, p fleet.Pair, source, target *cluster, s, t *side) fleet.Outcome {
	out := fleet.Outcome{Pair: p, Result: fleet.Failed}
	if s.err != nil {
		out.Detail = s.err.Error() + " (the token in " + p.Target.Name + " is kept until the link Secret is gone)"
		return out
	}
	o := c.pairOptions(p)
	var done []string
	for _, name := range grant.SecretsOf(o.Cluster, s.existing) {
		err := source.client.CoreV1().Secrets(o.LinkNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			out.Detail = fmt.Sprintf("%s: delete link Secret %s/%s: %s", source, o.LinkNamespace, name, grant.Describe(err))
			return out
		default:
			done = append(done, fmt.Sprintf("deleted link Secret %s/%s in %s", o.LinkNamespace, name, p.Source.Name))
		}
	}
	if t.err != nil {
		out.Detail = strings.Join(append(done, t.err.Error()), "; ")
		return out
	}
	deleted, err := target.deleteTracked(ctx, grant.TargetObjects(o).Token)
	if err != nil {
		out.Detail = strings.Join(append(done, err.Error()), "; ")
		return out
	}
	if deleted {
		done = append(done, fmt.Sprintf("deleted token Secret %s/%s in %s", o.Namespace, o.TokenName(), p.Target.Name))
	}
	if len(done) == 0 {
		out.Result = fleet.Unchanged
		out.Detail = fmt.Sprintf("not linked: no link Secret for %s in %s/%s, no token Secret %s/%s in %s", p.Target.Name, p.Source.Name, o.LinkNamespace,
			o.Namespace, o.TokenName(), p.Target.Name)
		return out
	}
	out.Result, out.Detail = fleet.Unlinked, strings.Join(done, "; ")
	return out
}

// revokeIfLast deletes the ServiceAccount, ClusterRole and
// ClusterRoleBinding of target m once no token of the ServiceAccount is
// left, and says so in the outcomes of m's pairs; a failure fails them.
func (c *linkCmd) revokeIfLast(ctx context.Context, t *cluster, m fleet.Member, outs []fleet.Outcome) {
	var mine []*fleet.Outcome
	for i := range outs {
		if outs[i].Pair.Target.Context == m.Context {
			mine = append(mine, &outs[i])
		}
	}
	report := func(result fleet.Result, what string) {
		for _, out := range mine {
			if result == fleet.Failed || out.Result == fleet.Unchanged {
				out.Result = result
			}
			out.Detail = strings.TrimPrefix(out.Detail+"; "+what, "; ")
		}
	}
	o := c.pairOptions(mine[0].Pair)
	others, err := t.otherTokens(ctx, o)
	if err != nil {
		report(fleet.Failed, err.Error())
		return
	}
	if len(others) > 0 {
		c.fleetProgress("%s: kept ServiceAccount %s/%s and its role: token Secrets %s still use them", t, o.Namespace, grant.ServiceAccount, strings.Join(others, ", "))
		return
	}
	tg := grant.TargetObjects(o)
	var gone []string
	for _, obj := range []runtime.Object{tg.ClusterRoleBinding, tg.ClusterRole, tg.ServiceAccount} {
		deleted, err := t.deleteTracked(ctx, obj)
		if err != nil {
			report(fleet.Failed, err.Error())
			return
		}
		if deleted {
			gone = append(gone, refOf(obj))
		}
	}
	if len(gone) > 0 {
		report(fleet.Unlinked, fmt.Sprintf("deleted %s in %s, its last token gone", strings.Join(gone, ", "), m.Name))
	}
}

// gvrOf are the resources of the kinds link writes.
var gvrOf = map[string]schema.GroupVersionResource{
	"Namespace":          {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"Secret":             {Version: "v1", Resource: "secrets"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
}

// refOf names obj for a reader: "Secret mcmirror/mcmirror-link-token-east".
func refOf(obj runtime.Object) string {
	u, err := grant.Clean(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return u.GetKind() + " " + strings.TrimPrefix(u.GetNamespace()+"/"+u.GetName(), "/")
}

// metadataOf is a client of obj's resource in c that reads and deletes
// objects by their metadata alone: a Secret's data never comes back.
func (c *cluster) metadataOf(obj runtime.Object) (metadata.ResourceInterface, string, error) {
	u, err := grant.Clean(obj)
	if err != nil {
		return nil, "", err
	}
	gvr, ok := gvrOf[u.GetKind()]
	if !ok {
		return nil, "", fmt.Errorf("no resource for a %T", obj)
	}
	return c.metadata.Resource(gvr).Namespace(u.GetNamespace()), u.GetName(), nil
}

// applyTracked applies obj and says what that did: "" when nothing
// changed (the object was there as wanted), else "created REF",
// "updated REF", or "applied REF" when the object could not be read
// before (no get permission), so that nobody knows. A namespace that is
// there is left as it is.
func (c *cluster) applyTracked(ctx context.Context, obj runtime.Object) (string, error) {
	mc, name, err := c.metadataOf(obj)
	if err != nil {
		return "", err
	}
	var before string
	m, getErr := mc.Get(ctx, name, metav1.GetOptions{})
	if getErr == nil {
		before = m.ResourceVersion
		// A link needs nothing of its namespace but that it is there; and
		// the API server rewrites a namespace on the first apply after its
		// creation (the label and finalizer it adds get an owner).
		if _, ns := obj.(*corev1.Namespace); ns {
			return "", nil
		}
	}
	after, err := c.apply(ctx, obj)
	if err != nil {
		return "", err
	}
	switch {
	case apierrors.IsNotFound(getErr):
		return "created " + refOf(obj), nil
	case getErr != nil:
		return "applied " + refOf(obj), nil
	case before == after:
		return "", nil
	}
	return "updated " + refOf(obj), nil
}

// deleteTracked deletes obj and says whether it was there.
func (c *cluster) deleteTracked(ctx context.Context, obj runtime.Object) (bool, error) {
	mc, name, err := c.metadataOf(obj)
	if err != nil {
		return false, err
	}
	switch err := mc.Delete(ctx, name, metav1.DeleteOptions{}); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s: delete %s: %s", c, refOf(obj), grant.Describe(err))
	}
	return true, nil
}

package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/fleet"
)

// MemberFacts is what a check of a fleet found in one cluster: what the
// cluster, as a source, knows of each cluster it links.
type MemberFacts struct {
	// Now is when the facts were collected; ages are judged against it.
	Now time.Time
	// Server is the API server's URL; APIErr why it could not be asked,
	// in which case nothing else is set.
	Server, APIErr string
	// Links are the link Secrets, each tried with its credentials, as a
	// check of the one cluster tries them.
	Links LinkFacts
	// Gateway is the gateway as installed and its /peers.
	Gateway GatewayFacts
	// DNS is what each cluster DNS replica says of its links.
	DNS DNSLinks
}

// DNSLinks is what the replicas of the cluster DNS say of their links, in
// the series of their /metrics, read through the API server's proxy to
// each pod.
type DNSLinks struct {
	// Deployment is namespace/name of the cluster DNS.
	Deployment string
	// Unread says why the replicas were not asked: no cluster DNS, no
	// mcmirror or prometheus plugin in its Corefile, metrics on loopback.
	Unread string
	// PodsErr is why its pods could not be listed.
	PodsErr string
	// Replicas are its running pods, in name order.
	Replicas []DNSReplica
}

// DNSReplica is one running pod of the cluster DNS.
type DNSReplica struct {
	// Pod is namespace/name.
	Pod string
	// Err is why its metrics could not be read.
	Err string
	// Links are its link states, by cluster name.
	Links map[string]ReplicaLink
}

// ReplicaLink is one replica's state of one linked cluster, from
// coredns_mcmirror_link_synced, _link_up, _link_withdrawn and
// _link_last_sync_timestamp_seconds.
type ReplicaLink struct {
	Synced, Up, Withdrawn bool
	// LastSeen is the last list, watch event or bookmark the replica had
	// from the cluster: its last sign of life; zero when none.
	LastSeen time.Time
}

// PairCheck is the judgement of one pair of a fleet: the source links the
// target.
type PairCheck struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Status Status `json:"status"`
	// Linked says whether a link Secret of the source links the target and
	// works: yes, no, refused, failing, denied, untested, "?" (not known).
	Linked string `json:"linked"`
	// Synced is how many of the source's DNS replicas have synced the link
	// and are up, of how many run: "2/2"; "-" where not read.
	Synced string `json:"synced"`
	// LastChange is how long ago the replica that heard last from the
	// target did: "3.2s ago"; "-" when none did.
	LastChange string `json:"lastChange"`
	// Gateway is how the source's gateway sees the target's: alive, down,
	// unprobed, "?", or "-" where the pair does not use gateway mode.
	Gateway string `json:"gateway"`
	// Problems are the pair's results that are not ok, each with its fix.
	Problems []Result `json:"problems,omitempty"`
}

// EvaluateFleet judges each pair from the facts of its clusters, by
// context. It has no effects.
func EvaluateFleet(pairs []fleet.Pair, facts map[string]*MemberFacts) []PairCheck {
	out := make([]PairCheck, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, evalPair(p, facts[p.Source.Context]))
	}
	return out
}

func evalPair(p fleet.Pair, s *MemberFacts) PairCheck {
	pc := PairCheck{Source: p.Source.Name, Target: p.Target.Name, Status: OK, Linked: "?", Synced: "?", LastChange: "-", Gateway: "?"}
	subject := p.String()
	if s.APIErr != "" {
		pc.Status = Fail
		pc.Problems = []Result{{ID: "api", Subject: subject, Status: Fail,
			Message: fmt.Sprintf("the API server of %s (%s) does not answer: %s", p.Source.Name, s.Server, s.APIErr),
			Fix:     fmt.Sprintf("kubectl --context %s cluster-info; check --kubeconfig and the context", p.Source.Context)}}
		return pc
	}
	var rs [3]Result
	pc.Linked, rs[0] = evalPairLink(p, s.Links)
	pc.Synced, pc.LastChange, rs[1] = evalPairSync(p, s.DNS, s.Now)
	pc.Gateway, rs[2] = evalPairGateway(p, s.Gateway)
	for _, r := range rs {
		pc.Status = pc.Status.worse(r.Status)
		if r.Status != OK {
			r.Subject = subject
			pc.Problems = append(pc.Problems, r)
		}
	}
	return pc
}

// evalPairLink judges the source's link Secret for the target as a check
// of the source judges it (evalLinks).
func evalPairLink(p fleet.Pair, f LinkFacts) (string, Result) {
	src, tgt := p.Source.Name, p.Target.Name
	switch {
	case !f.Configured && len(f.Peers) == 0:
		return "no", Result{ID: "linked", Status: Fail,
			Message: fmt.Sprintf("no part of %s reads link Secrets (no controller with --link-secrets, no mcmirror DNS with link_secrets): %s links no cluster", src, src),
			Fix:     fmt.Sprintf("install mcmirror in %s (the chart, or deploy/), then coredns-mc link", src)}
	case f.Err != "":
		return "?", Result{ID: "linked", Status: Warn, Message: fmt.Sprintf("could not list the link Secrets of %s in %s: %s", src, f.Namespace, f.Err),
			Fix: "run check as a user who may list secrets in " + f.Namespace}
	}
	var mine []Result
	for _, r := range evalLinks(f) {
		if r.Subject == tgt {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return "no", Result{ID: "linked", Status: Fail,
			Message: fmt.Sprintf("%s has no link Secret for %s in %s: its DNS does not answer %s's names", src, tgt, f.Namespace, tgt),
			Fix: fmt.Sprintf("coredns-mc link --context %s --cluster %s --source-context %s --source-cluster %s",
				p.Target.Context, tgt, p.Source.Context, src)}
	}
	worst := mostSevere(mine)
	worst.ID, worst.Subject = "linked", ""
	cell := "no" // a --peer that no Secret links
	for _, s := range f.Secrets {
		if s.Cluster == tgt {
			cell = linkCell(s, f.Local) // the first, as the watchers take it
			break
		}
	}
	return cell, worst
}

// linkCell is one word for the state of a link Secret of cluster local.
func linkCell(s LinkSecret, local string) string {
	switch {
	case s.Refused != "" || s.Cluster == local:
		return "refused"
	case s.NotProbed != "":
		return "untested"
	case s.ProbeErr != "":
		return "failing"
	case len(s.Denied) > 0:
		return "denied"
	}
	return "yes"
}

// evalPairSync judges what the source's DNS replicas say of their link to
// the target: each must have synced it and be up. It returns the synced
// cell, the last change cell and the result.
func evalPairSync(p fleet.Pair, d DNSLinks, now time.Time) (string, string, Result) {
	src, tgt := p.Source.Name, p.Target.Name
	r := Result{ID: "synced", Status: OK}
	switch {
	case d.Unread != "":
		return "-", "-", r.judged(Warn, fmt.Sprintf("not read: %s", d.Unread), fmt.Sprintf("coredns-mc check --context %s says what is installed there", p.Source.Context))
	case d.PodsErr != "":
		return "?", "-", r.judged(Warn, fmt.Sprintf("could not list the pods of %s: %s", d.Deployment, d.PodsErr), "run check as a user who may list pods in "+namespaceOf(d.Deployment))
	case len(d.Replicas) == 0:
		return "0/0", "-", r.judged(Fail, fmt.Sprintf("no pod of %s runs in %s: nothing answers %s's names there", d.Deployment, src, tgt),
			fmt.Sprintf("kubectl --context %s -n %s describe deployment %s", p.Source.Context, namespaceOf(d.Deployment), nameOf(d.Deployment)))
	}
	var bad, unread []string
	synced, unlinked := 0, 0
	var oldest time.Time
	for _, rep := range d.Replicas {
		if rep.Err != "" {
			unread = append(unread, fmt.Sprintf("pod %s: %s", rep.Pod, rep.Err))
			continue
		}
		l, ok := rep.Links[tgt]
		if ok && !l.LastSeen.IsZero() && (oldest.IsZero() || l.LastSeen.Before(oldest)) {
			oldest = l.LastSeen
		}
		switch {
		case !ok:
			unlinked++
			bad = append(bad, fmt.Sprintf("pod %s does not link %s", rep.Pod, tgt))
		case l.Withdrawn:
			bad = append(bad, fmt.Sprintf("pod %s has withdrawn %s's names: its link failed for longer than stale_max_age (last heard %s)", rep.Pod, tgt, ago(l.LastSeen, now)))
		case !l.Synced:
			bad = append(bad, fmt.Sprintf("pod %s has not synced %s yet", rep.Pod, tgt))
		case !l.Up:
			bad = append(bad, fmt.Sprintf("pod %s's link to %s is down, serving its last known state (last heard %s)", rep.Pod, tgt, ago(l.LastSeen, now)))
		default:
			synced++
		}
	}
	cell, last := fmt.Sprintf("%d/%d", synced, len(d.Replicas)), "-"
	if !oldest.IsZero() {
		last = ago(oldest, now)
	}
	switch {
	case len(bad) > 0 && unlinked == len(bad):
		r = r.judged(Fail, strings.Join(append(bad, unread...), "; "), fmt.Sprintf("the DNS links each cluster of a usable link Secret within seconds (see linked); with one there, kubectl --context %s -n %s logs <pod> | grep %s",
			p.Source.Context, namespaceOf(d.Deployment), tgt))
	case len(bad) > 0:
		r = r.judged(Fail, strings.Join(append(bad, unread...), "; "), fmt.Sprintf("kubectl --context %s -n %s logs <pod> | grep %s (the link's errors: unreachable, unauthorized, forbidden); coredns-mc check --context %s",
			p.Source.Context, namespaceOf(d.Deployment), tgt, p.Source.Context))
	case len(unread) > 0:
		r = r.judged(Warn, "could not read the metrics of "+strings.Join(unread, "; "),
			fmt.Sprintf("check needs get pods/proxy in %s, and the Corefile's prometheus plugin must listen on the pods' address", namespaceOf(d.Deployment)))
	}
	return cell, last, r
}

// evalPairGateway judges the target's gateway as the source's gateway sees
// it, where the pair uses gateway mode: the target is one of its --peer.
func evalPairGateway(p fleet.Pair, g GatewayFacts) (string, Result) {
	src, tgt := p.Source.Name, p.Target.Name
	r := Result{ID: "gateway", Status: OK}
	addr, peer := g.Config.Peers[tgt]
	if !g.Installed || !peer {
		return "-", r
	}
	fix := fmt.Sprintf("check that %s's gateway runs (kubectl --context %s -n mcmirror get pods) and that %s reaches its ingress at %s; coredns-mc check --context %s",
		tgt, p.Target.Context, src, addr, p.Source.Context)
	st, known := g.Peers[tgt]
	switch {
	case g.Unserved:
		return "down", r.judged(Fail, fmt.Sprintf("no gateway pod of %s serves Service %s: %s", src, g.Service, g.ProxyErr),
			fmt.Sprintf("kubectl --context %s -n mcmirror get pods -l app.kubernetes.io/name=mcmirror-gateway", p.Source.Context))
	case g.PeersErr != "":
		return "?", r.judged(Warn, fmt.Sprintf("could not read %s's gateway's peers: %s", src, g.PeersErr), "check needs get services/proxy in mcmirror")
	case !known || !st.Probed:
		return "unprobed", r.judged(Warn, fmt.Sprintf("%s's gateway has not probed %s's ingress (%s) yet", src, tgt, addr), fix)
	case !st.Alive:
		return "down", r.judged(Fail, fmt.Sprintf("%s's gateway cannot reach %s's ingress at %s since %s: %s", src, tgt, addr, st.Since.UTC().Format(time.RFC3339), st.Error), fix)
	}
	return "alive", r
}

func namespaceOf(ref string) string { ns, _, _ := strings.Cut(ref, "/"); return ns }

func nameOf(ref string) string { _, n, _ := strings.Cut(ref, "/"); return n }

package check

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/mcmirror/mcmirror/internal/link"
)

// LinkSecret is what check found of one link Secret.
type LinkSecret struct {
	// Name of the Secret.
	Name string
	// Cluster it links, as internal/link reads it; empty when it names
	// none.
	Cluster string
	// Refused is why the controller's and the DNS's policy (internal/link,
	// with their --allow-insecure-kubeconfig) refuse it, if they do;
	// Reason is the refusal's reason.
	Refused string
	Reason  link.Reason
	// Server is the API server URL of its kubeconfig.
	Server string
	// NotProbed says why check did not use its credentials (they run a
	// command or read files, which check never does on this machine).
	NotProbed string
	// ProbeErr is why a list of Services, then of EndpointSlices, with its
	// credentials failed; ProbeReason classifies it (link.FailureReason).
	ProbeErr, ProbeReason string
	// Denied lists what its token may not do of what a link needs (a
	// SelfSubjectAccessReview with its own credentials).
	Denied []string
}

// LinkFacts is what check found of the links of this cluster.
type LinkFacts struct {
	// Namespace of the link Secrets; Configured is false when neither the
	// controller nor the DNS reads link Secrets.
	Namespace  string
	Configured bool
	// Err is why the Secrets could not be listed.
	Err     string
	Secrets []LinkSecret
	// Peers are the gateway's --peer clusters, which must be linked.
	Peers []string
	// Local is this cluster's name; a Secret may not link it.
	Local string
}

// evalLinks has one result per link Secret, and one per --peer cluster
// that no Secret links.
func evalLinks(f LinkFacts) []Result {
	if !f.Configured && len(f.Peers) == 0 {
		return []Result{{ID: "link", Status: OK, Message: "no component reads link Secrets here: this cluster links to no other"}}
	}
	if f.Err != "" {
		return []Result{{ID: "link", Status: Warn, Message: fmt.Sprintf("could not list the link Secrets in %s: %s", f.Namespace, f.Err),
			Fix: "run check as a user who may list secrets in " + f.Namespace}}
	}
	var out []Result
	seen := map[string]string{} // cluster → first Secret, as the watchers take them
	linked := map[string]bool{}
	for _, s := range f.Secrets {
		out = append(out, evalLinkSecret(f, s, seen))
		if s.Cluster != "" && s.Refused == "" {
			linked[s.Cluster] = true
		}
	}
	for _, p := range f.Peers {
		if !linked[p] {
			out = append(out, Result{ID: "link", Subject: p, Status: Fail,
				Message: fmt.Sprintf("the gateway has --peer %s, but no usable link Secret for %s in %s: its Services are not mirrored", p, p, f.Namespace),
				Fix:     fmt.Sprintf("coredns-mc link --context %s --cluster %s | kubectl apply -f -   (or drop --peer %s from the gateway: the chart's gateway.peers)", p, p, p)})
		}
	}
	if len(out) == 0 {
		out = append(out, Result{ID: "link", Status: OK, Message: "no link Secrets in " + f.Namespace + ": this cluster links to no other yet"})
	}
	return out
}

func evalLinkSecret(f LinkFacts, s LinkSecret, seen map[string]string) Result {
	r := Result{ID: "link", Subject: cmp.Or(s.Cluster, s.Name)}
	ref := f.Namespace + "/" + s.Name
	switch {
	case s.Refused != "":
		return r.judged(Fail, fmt.Sprintf("Secret %s is refused (%s): %s", ref, s.Reason, s.Refused), refusalFix(s, ref))
	case s.Cluster == f.Local && f.Local != "":
		return r.judged(Fail, fmt.Sprintf("Secret %s links %q, which is this cluster's own name: it is refused", ref, s.Cluster),
			fmt.Sprintf("kubectl -n %s delete secret %s (a cluster does not link itself), or fix the %s label", f.Namespace, s.Name, "multicluster.linkerd.io/cluster-name"))
	}
	if first, dup := seen[s.Cluster]; dup {
		return r.judged(Warn, fmt.Sprintf("Secret %s links %s, as %s/%s does: only one of them is used", ref, s.Cluster, f.Namespace, first),
			fmt.Sprintf("kubectl -n %s delete secret %s (keep one link Secret per cluster)", f.Namespace, s.Name))
	}
	seen[s.Cluster] = s.Name
	switch {
	case s.NotProbed != "":
		return r.judged(Warn, fmt.Sprintf("Secret %s (%s) is accepted by the configured policy; not tried from here: %s", ref, s.Server, s.NotProbed),
			"try the kubeconfig of the Secret by hand: kubectl --kubeconfig <its kubeconfig> get services -A --limit 1")
	case s.ProbeErr != "":
		return r.judged(Fail, fmt.Sprintf("Secret %s: %s answers %s: %s", ref, s.Server, s.ProbeReason, s.ProbeErr), probeFix(s))
	case len(s.Denied) > 0:
		return r.judged(Fail, fmt.Sprintf("Secret %s: its token may not %s at %s", ref, strings.Join(s.Denied, ", "), s.Server),
			fmt.Sprintf("kubectl --context %s apply -f deploy/remote-link.yaml, or run coredns-mc link --cluster %s again", s.Cluster, s.Cluster))
	}
	return r.judged(OK, fmt.Sprintf("Secret %s: %s answers, and its token may list and watch Services and EndpointSlices", ref, s.Server), "")
}

func refusalFix(s LinkSecret, ref string) string {
	c := cmp.Or(s.Cluster, "NAME")
	switch s.Reason {
	case link.ReasonExec, link.ReasonAuthProvider, link.ReasonFiles, link.ReasonHTTP, link.ReasonSkipTLSVerify:
		return fmt.Sprintf("write the Secret with inline credentials over verified https (coredns-mc link --cluster %s), or allow %s with --allow-insecure-kubeconfig and allow_insecure_kubeconfig", c, s.Reason)
	}
	return fmt.Sprintf("write %s again with coredns-mc link --cluster %s (type %s, key kubeconfig, label multicluster.linkerd.io/cluster-name)", ref, c, "mirror.linkerd.io/remote-kubeconfig")
}

func probeFix(s LinkSecret) string {
	switch s.ProbeReason {
	case link.FailureUnauthorized:
		return fmt.Sprintf("the token is revoked or expired: coredns-mc link --context %s --cluster %s | kubectl apply -f -", s.Cluster, s.Cluster)
	case link.FailureForbidden:
		return fmt.Sprintf("kubectl --context %s apply -f deploy/remote-link.yaml (the link's ClusterRole and binding)", s.Cluster)
	case link.FailureUnreachable:
		return fmt.Sprintf("check that %s is up and reachable from this cluster's pods; if only another address is, link again with coredns-mc link --api-server", s.Server)
	}
	return fmt.Sprintf("kubectl --context %s get --raw /readyz", s.Cluster)
}

// Package check says whether mcmirror works in a cluster, and if not, what
// to do: `coredns-mc check`. It reads mcmirror's objects as installed
// (deploy/*.yaml, or the Helm chart, which keeps their names), asks the API
// server, the cluster DNS and the peers' gateways, and reports one result
// per check: ok, warn or fail, with a one-line fix.
//
// Collecting (collect.go, probe.go) and judging (everything else) are
// apart: Collect gathers Facts with API calls and dials, each bounded by
// its own timeout, and Evaluate turns Facts into Results without any
// effect, so that the judgement is tested without a cluster.
//
// A check of a fleet (fleet.go) is made the same way: CollectMember
// gathers, in each source cluster, its link Secrets, its gateway's peers
// and its DNS replicas' link states, and EvaluateFleet judges each ordered
// pair from its source's facts.
package check

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Facts is everything one run found.
type Facts struct {
	// Now is when the facts were collected; expiries are judged against it.
	Now time.Time
	// Server is the API server's URL; Version what it says it runs;
	// APIErr why it could not be asked, in which case nothing else is set.
	Server, Version, APIErr string
	Install                 Install
	RBAC                    []RBACFacts
	DNS                     DNSFacts
	Links                   LinkFacts
	Gateway                 GatewayFacts
	// Dials are the TLS dials of each --peer's ingress, by cluster.
	Dials  map[string]PeerDial
	Egress EgressFacts
	Lease  LeaseFacts
}

// Cluster is this cluster's name as its parts are configured.
func (f *Facts) Cluster() string {
	if f.Install.Controller.Found {
		if c := ParseController(f.Install.Controller.Args).Cluster; c != "" {
			return c
		}
	}
	if f.Install.Gateway.Found {
		if c := ParseGateway(f.Install.Gateway.Args).Cluster; c != "" {
			return c
		}
	}
	return ParseCorefile(f.Install.Corefile).Cluster
}

// IDs lists every check's ID in report order; a report has each at least
// once, but for api alone when the API server does not answer.
var IDs = []string{
	"api", "cluster-name", "dns-source",
	"rbac-controller", "rbac-gateway", "rbac-dns", "rbac-link",
	"dns", "link", "gateway", "peer-reachable", "peer-certificate",
	"egress-ports", "controller-leader", "versions",
}

// Evaluate judges facts. It has no effects.
func Evaluate(f *Facts) []Result {
	if f.APIErr != "" {
		return []Result{{ID: "api", Status: Fail, Message: fmt.Sprintf("the API server %s does not answer: %s", f.Server, f.APIErr),
			Fix: "check --kubeconfig and --context (kubectl cluster-info with the same ones)"}}
	}
	out := []Result{
		{ID: "api", Status: OK, Message: strings.TrimSpace(fmt.Sprintf("%s answers %s", f.Server, f.Version))},
		evalClusterName(f.Install),
		evalSource(f.Install),
	}
	for _, r := range f.RBAC {
		out = append(out, evalRBAC(r))
	}
	out = append(out, evalDNS(f.DNS))
	out = append(out, evalLinks(f.Links)...)
	out = append(out, evalGateway(f.Gateway, f.Now))
	peers := evalPeers(f.Gateway, f.Dials, f.Now)
	if !f.Gateway.Installed {
		peers = []Result{{ID: "peer-reachable", Status: OK, Message: "no gateway here: no peers to reach"}}
	}
	out = append(out, peers...)
	if !slices.ContainsFunc(out, func(r Result) bool { return r.ID == "peer-certificate" }) {
		out = append(out, Result{ID: "peer-certificate", Status: OK, Message: "no --peer: no peer certificate to check"})
	}
	out = append(out, evalEgress(f.Egress), evalLeader(f.Lease, f.Now), evalVersions(f.Install))
	return out
}

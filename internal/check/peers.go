package check

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/peers"
	"github.com/mcmirror/mcmirror/internal/trust"
)

// ExpiryWarning is how long before its end a gateway certificate is
// reported (warn); an expired one fails.
const ExpiryWarning = 14 * 24 * time.Hour

// GatewayFacts is what check found of this cluster's gateway, through the
// API server's proxy to its metrics Service, and of the trust root.
type GatewayFacts struct {
	// Installed is whether the gateway Deployment exists; NotInstalled
	// says what was found instead, Required what needs it when it is not.
	Installed    bool
	NotInstalled string
	Required     string
	Config       GatewayConfig
	// Service is the metrics Service read through, namespace/name.
	Service string
	// ProxyErr is why /readyz could not be read; Unserved is set when the
	// API server says nothing serves it (no endpoint, or a refused
	// connection): no gateway pod runs.
	ProxyErr string
	Unserved bool
	// Ready is whether /readyz answered 200; ReadyAnswer what it answered.
	Ready       bool
	ReadyAnswer string
	// CertExpiry is the gateway's own certificate's NotAfter, from its
	// coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds;
	// CertErr is why it is unknown.
	CertExpiry time.Time
	CertErr    string
	// Peers is /peers: each peer's state as the gateway's prober sees it;
	// PeersErr is why it could not be read.
	Peers    map[string]peers.State
	PeersErr string
	// Roots is the trust root the peers' certificates must chain to;
	// RootsFrom says where it was read, RootsErr why it could not be.
	Roots     *x509.CertPool
	RootsFrom string
	RootsErr  string
	// GatewayMirrors are the clusters that gateway-mode mirrors here
	// belong to: each needs a --peer.
	GatewayMirrors []string
}

// PeerDial is what check saw when it dialled a peer's ingress with TLS.
type PeerDial struct {
	// Addr dialled: the gateway's --peer address.
	Addr string
	// Err is why no certificate came; Answered is set when something
	// answered at Addr (a refusal, a TLS alert) rather than nothing at all
	// (a timeout, no route).
	Err      string
	Answered bool
	// Chain is the server's certificate chain, leaf first.
	Chain []*x509.Certificate
}

func evalGateway(f GatewayFacts, now time.Time) Result {
	r := Result{ID: "gateway"}
	switch {
	case !f.Installed && f.Required != "":
		return r.judged(Fail, f.NotInstalled+", but "+f.Required,
			"install the gateway (the chart's gateway.enabled, or deploy/gateway.yaml) after making Secret mcmirror/mcmirror-gateway-tls")
	case !f.Installed:
		return r.judged(OK, f.NotInstalled, "")
	case f.Unserved:
		return r.judged(Fail, fmt.Sprintf("no gateway pod serves Service %s: %s", f.Service, f.ProxyErr),
			"kubectl -n mcmirror get pods -l app.kubernetes.io/name=mcmirror-gateway; kubectl -n mcmirror describe deployment mcmirror-gateway (Secret mcmirror-gateway-tls present?)")
	case f.ProxyErr != "":
		return r.judged(Warn, fmt.Sprintf("could not read the gateway's /readyz through the API server (Service %s): %s", f.Service, f.ProxyErr),
			"kubectl -n mcmirror port-forward service/mcmirror-gateway-metrics 9155 & curl localhost:9155/readyz; check needs get services/proxy in mcmirror")
	case !f.Ready:
		return r.judged(Fail, fmt.Sprintf("the gateway is not ready: /readyz answers %s", f.ReadyAnswer),
			"kubectl -n mcmirror logs deployment/mcmirror-gateway (informers not synced: its RBAC, its API server)")
	case f.CertErr != "":
		return r.judged(Warn, "the gateway is ready; its certificate's expiry is unknown: "+f.CertErr,
			"openssl x509 -noout -enddate of tls.crt in Secret mcmirror/mcmirror-gateway-tls")
	}
	left := f.CertExpiry.Sub(now)
	msg := fmt.Sprintf("ready; its certificate (cluster %s) expires %s", f.Config.Cluster, when(f.CertExpiry, now))
	switch {
	case left <= 0:
		return r.judged(Fail, fmt.Sprintf("the gateway's own certificate expired %s: peers refuse it", when(f.CertExpiry, now)),
			"renew Secret mcmirror/mcmirror-gateway-tls (deploy/README.md, The certificate); the gateway reloads it within a minute or two")
	case left < ExpiryWarning:
		return r.judged(Warn, msg, "renew Secret mcmirror/mcmirror-gateway-tls before it expires (cert-manager: renewBefore)")
	}
	return r.judged(OK, msg, "")
}

// when writes t and how far it is from now, in days or hours.
func when(t, now time.Time) string {
	d := t.Sub(now)
	ago := d < 0
	if ago {
		d = -d
	}
	span := d.Round(time.Minute).String()
	if d >= 48*time.Hour {
		span = fmt.Sprintf("%d days", int(math.Floor(d.Hours()/24)))
	}
	if ago {
		return fmt.Sprintf("on %s, %s ago", t.UTC().Format(time.RFC3339), span)
	}
	return fmt.Sprintf("on %s, in %s", t.UTC().Format(time.RFC3339), span)
}

// evalPeers has, for each --peer, a peer-reachable and a peer-certificate
// result, and a peer-reachable failure for each cluster with gateway-mode
// mirrors but no --peer.
func evalPeers(f GatewayFacts, dials map[string]PeerDial, now time.Time) []Result {
	if !f.Installed {
		return nil
	}
	var out []Result
	for _, c := range f.GatewayMirrors {
		if _, ok := f.Config.Peers[c]; !ok {
			out = append(out, Result{ID: "peer-reachable", Subject: c, Status: Fail,
				Message: fmt.Sprintf("mirrors of %s point at the egress, but the gateway has no --peer %s: their connections are reset (unknown_peer)", c, c),
				Fix:     fmt.Sprintf("give the gateway --peer %s=<its ingress address> (the chart's gateway.peers), then apply; or export %s's Services in flat mode", c, c)})
		}
	}
	if len(f.Config.PeerOrder) == 0 && len(out) == 0 {
		return []Result{{ID: "peer-reachable", Status: OK, Message: "the gateway has no --peer: it carries no traffic to other clusters"}}
	}
	for _, p := range f.Config.PeerOrder {
		d := dials[p]
		st, known := f.Peers[p]
		out = append(out, evalReach(p, d, st, known && f.PeersErr == "", f), evalCert(p, d, st, known, f, now))
	}
	return out
}

func evalReach(p string, d PeerDial, st peers.State, known bool, f GatewayFacts) Result {
	r := Result{ID: "peer-reachable", Subject: p}
	addr := f.Config.Peers[p]
	fix := fmt.Sprintf("check that %s's gateway runs (kubectl --context %s -n mcmirror get pods) and that %s reaches its Service mcmirror-gateway, port 4143; --peer is the chart's gateway.peers", p, p, addr)
	gw := "the gateway's /peers could not be read"
	if known {
		if st.Probed {
			gw = fmt.Sprintf("the gateway's probe: alive, %s", st.Latency.Round(time.Microsecond))
		} else {
			gw = "the gateway has not probed it yet"
		}
	}
	switch {
	case known && st.Probed && !st.Alive:
		return r.judged(Fail, fmt.Sprintf("the gateway cannot reach %s's ingress at %s since %s: %s", p, addr, st.Since.UTC().Format(time.RFC3339), st.Error), fix)
	case d.Err != "" && d.Answered:
		return r.judged(Fail, fmt.Sprintf("%s's ingress %s refuses from here: %s (%s)", p, addr, d.Err, gw), fix)
	case d.Err != "" && known && st.Probed:
		return r.judged(OK, fmt.Sprintf("%s (%s); not reachable from this machine (%s), as an address inside the network may not be", gw, addr, d.Err), "")
	case d.Err != "":
		return r.judged(Warn, fmt.Sprintf("%s's ingress %s does not answer from here: %s; %s", p, addr, d.Err, gw), fix)
	}
	return r.judged(OK, fmt.Sprintf("%s answers from here; %s", addr, gw), "")
}

func evalCert(p string, d PeerDial, st peers.State, known bool, f GatewayFacts, now time.Time) Result {
	r := Result{ID: "peer-certificate", Subject: p}
	addr := f.Config.Peers[p]
	renew := fmt.Sprintf("issue %s's gateway certificate with URI SAN spiffe://%s/cluster/%s from %s's intermediate of the shared root, into its Secret mcmirror/mcmirror-gateway-tls", p, f.Config.TrustDomain, p, p)
	// The gateway's own probe verifies the peer as its tunnels do, with
	// the gateway's code of the version it runs (the root, the peer's
	// intermediate, the identity): a certificate it refuses is refused.
	if known && st.Error != "" && certificateError(st.Error) {
		return r.judged(Fail, fmt.Sprintf("the gateway refuses %s's certificate (%s): %s", p, addr, st.Error), renew)
	}
	if len(d.Chain) == 0 {
		return r.judged(Warn, fmt.Sprintf("not checked: no certificate came from %s (see peer-reachable)", addr),
			"make "+addr+" reachable from this machine, or read it where it is: openssl s_client -connect "+addr)
	}
	leaf := d.Chain[0]
	got, err := trust.ClusterOf(leaf, f.Config.TrustDomain)
	expiry, which := chainExpiry(d.Chain)
	switch {
	case err != nil:
		return r.judged(Fail, fmt.Sprintf("%s presents a certificate that is no gateway identity: %v", addr, err), renew)
	case got != p:
		return r.judged(Fail, fmt.Sprintf("%s presents the certificate of cluster %q, not %q: --peer %s points at another cluster's gateway, or %s's certificate names the wrong cluster", addr, got, p, p, p),
			fmt.Sprintf("set --peer %s= to %s's own ingress address, or %s", p, p, renew))
	case now.After(expiry):
		return r.judged(Fail, fmt.Sprintf("%s's gateway certificate (%s) expired %s (%s): every connection to it fails", p, addr, when(expiry, now), which), "renew it: "+renew)
	case now.Before(leaf.NotBefore):
		return r.judged(Fail, fmt.Sprintf("%s's gateway certificate (%s) is not valid before %s (is a clock wrong?)", p, addr, leaf.NotBefore.UTC().Format(time.RFC3339)),
			"check the clocks of both clusters and of the issuer; "+renew)
	}
	if f.Roots != nil {
		if _, err := VerifyChain(d.Chain, f.Roots, f.Config.TrustDomain, now); err != nil {
			return r.judged(Fail, fmt.Sprintf("%s's gateway certificate is not one the gateways accept (trust root from %s): %v", p, f.RootsFrom, err),
				"issue "+p+"'s gateway certificate from "+p+"'s intermediate, itself issued by the root in ca.crt of each Secret mcmirror-gateway-tls (deploy/certificates.md)")
		}
	}
	msg := fmt.Sprintf("%s is %s, expires %s", addr, trust.Identity(f.Config.TrustDomain, p), when(expiry, now))
	if which != "the certificate" {
		msg += " (" + which + ")"
	}
	switch {
	case expiry.Sub(now) < ExpiryWarning:
		return r.judged(Warn, msg, "renew it before it expires: "+renew)
	case f.Roots == nil:
		return r.judged(Warn, msg+"; chain not checked: "+f.RootsErr,
			"give --gateway-ca FILE (the shared root), or run check as a user who may read Secret mcmirror/mcmirror-gateway-tls")
	}
	return r.judged(OK, msg+", issued by its intermediate of the trust root", "")
}

// chainExpiry is when a presented chain stops verifying: the earliest
// NotAfter of its certificates, and which one that is.
func chainExpiry(chain []*x509.Certificate) (time.Time, string) {
	t, which := chain[0].NotAfter, "the certificate"
	for _, c := range chain[1:] {
		if c.NotAfter.Before(t) {
			t, which = c.NotAfter, fmt.Sprintf("its issuer %q", c.Subject.CommonName)
		}
	}
	return t, which
}

// VerifyChain checks a peer gateway's chain, leaf first, against roots as a
// server's at time now, by the gateway's own rules (trust.VerifyPeer):
// it chains to a root, names one cluster of trustDomain, and was issued by
// that cluster's intermediate. It returns the cluster the chain names. An
// empty trustDomain is the gateway's default.
func VerifyChain(chain []*x509.Certificate, roots *x509.CertPool, trustDomain string, now time.Time) (string, error) {
	return trust.VerifyPeer(chain, roots, cmp.Or(trustDomain, trust.DefaultTrustDomain), now, x509.ExtKeyUsageServerAuth)
}

// certificateError tells a prober error that is about a certificate.
func certificateError(s string) bool {
	return strings.Contains(s, "x509:") || strings.Contains(s, "certificate") || strings.Contains(s, "reached the gateway of cluster")
}

package trust

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A cluster's credentials issue only its own identity (deploy/certificates.md):
// the root, whose key lives in no cluster, signs one intermediate CA per
// cluster, which names that cluster, and a cluster's intermediate issues its
// gateway's certificate. Whoever holds a cluster's intermediate key (that
// cluster's cert-manager, its operators) can issue certificates naming any
// cluster, and they chain to the root all the same; x509's URI name
// constraints cannot tell them apart, since they compare only the URI's
// host, the trust domain, which every cluster shares. So the chains x509
// verified are checked again: the certificate is accepted only through the
// intermediate of the cluster it names, signed by the root itself.

// IssuerError says why a certificate whose chain verifies is refused all
// the same: it was not issued by the intermediate of the cluster it names,
// signed by a root.
type IssuerError struct {
	// Cluster is the cluster the certificate names.
	Cluster string
	// Issuer is the cluster whose credentials issued it: the one the
	// root-signed intermediate of its chain names; empty when none does
	// (issued by the root itself). Bounded by what the root signed, so
	// it can label a metric.
	Issuer string
	msg    string
}

func (e *IssuerError) Error() string { return e.msg }

// AcceptedChain returns the first of chains, as x509 Verify returns them
// (the certificate first, a root of the trust bundle last), that is root →
// intermediate naming cluster → the certificate; without one, an
// *IssuerError saying what is wrong with the first chain.
func AcceptedChain(chains [][]*x509.Certificate, cluster, trustDomain string) ([]*x509.Certificate, error) {
	var first error
	for _, chain := range chains {
		err := checkChain(chain, cluster, trustDomain)
		if err == nil {
			return chain, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = &IssuerError{Cluster: cluster, msg: fmt.Sprintf("certificate for %s: no verified chain", cluster)}
	}
	return nil, first
}

// checkChain checks one verified chain of a certificate that names cluster.
func checkChain(chain []*x509.Certificate, cluster, trustDomain string) *IssuerError {
	const fix = "deploy/certificates.md"
	root := chain[len(chain)-1]
	e := &IssuerError{Cluster: cluster}
	if len(chain) == 1 {
		e.msg = fmt.Sprintf("certificate for %s is itself in the trust root file: that file holds the root only, "+
			"and the gateway's certificate is issued by its cluster's intermediate (%s)", cluster, fix)
		return e
	}
	if anchor, err := ClusterOf(root, trustDomain); err == nil {
		// An intermediate where the root should be: the trust root
		// file holds a cluster's intermediate (a CA Issuer whose
		// Secret lacks the root, say). What it signs, and what the CAs
		// it signs sign, would all chain to it: never an anchor.
		e.Issuer = anchor
		e.msg = fmt.Sprintf("certificate for %s chains to %s's intermediate %q, which the trust root file holds as a root: "+
			"that file holds the root only, and the certificate file the gateway certificate followed by its intermediate (%s)",
			cluster, anchor, root.Subject.CommonName, fix)
		return e
	}
	switch len(chain) {
	case 3:
		inter := chain[1]
		issuer, err := ClusterOf(inter, trustDomain)
		if err != nil {
			e.msg = fmt.Sprintf("certificate for %s issued by intermediate %q, which names no cluster (%v): "+
				"a cluster's intermediate carries the URI SAN %s (coredns-mc certs cluster makes it; %s)",
				cluster, inter.Subject.CommonName, err, Identity(trustDomain, cluster), fix)
			return e
		}
		if issuer != cluster {
			e.Issuer = issuer
			e.msg = fmt.Sprintf("certificate for %s issued by %s's intermediate %q: a cluster's gateway certificate must be issued by "+
				"its own cluster's intermediate; issue it from %s's (coredns-mc certs gateway --cluster %s --issuer <%s's intermediate>; %s)",
				cluster, issuer, inter.Subject.CommonName, cluster, cluster, cluster, fix)
			return e
		}
		return nil
	case 2:
		e.msg = fmt.Sprintf("certificate for %s issued by the root %q itself: a gateway certificate must be issued by its cluster's "+
			"intermediate, root → intermediate of %s → gateway (coredns-mc certs cluster, then coredns-mc certs gateway; %s)",
			cluster, root.Subject.CommonName, cluster, fix)
	default:
		var names []string
		for _, c := range chain[1 : len(chain)-1] {
			names = append(names, fmt.Sprintf("%q", c.Subject.CommonName))
		}
		// The one the root signed is the credentials that made the rest.
		e.Issuer, _ = ClusterOf(chain[len(chain)-2], trustDomain)
		e.msg = fmt.Sprintf("certificate for %s chains to the root through %d intermediates (%s), not one: only root → intermediate of %s → "+
			"gateway is accepted; issue it from an intermediate the root signed itself (%s)",
			cluster, len(chain)-2, strings.Join(names, ", "), cluster, fix)
	}
	return e
}

// ChainExpiry is when a chain stops verifying for want of its certificate
// or its intermediate: the earliest NotAfter of all but the root.
func ChainExpiry(chain []*x509.Certificate) time.Time {
	t := chain[0].NotAfter
	for _, c := range chain[:max(len(chain)-1, 1)] {
		if c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

// VerifyPeer checks a peer gateway's chain (its certificate first, then
// the certificates sent with it) against roots at time now (zero: the
// current time), for usage, by the gateways' rules: it chains to a root,
// names one cluster of trustDomain, and was issued by that cluster's
// intermediate. It returns that cluster. What the ingress and the egress do
// with every peer, for tools that judge a peer as they would.
func VerifyPeer(chain []*x509.Certificate, roots *x509.CertPool, trustDomain string, now time.Time, usage x509.ExtKeyUsage) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("no certificate")
	}
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	chains, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return "", err
	}
	cluster, err := ClusterOf(chain[0], trustDomain)
	if err != nil {
		return "", err
	}
	if _, err := AcceptedChain(chains, cluster, trustDomain); err != nil {
		return "", err
	}
	return cluster, nil
}

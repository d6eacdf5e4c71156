// Package trust is the gateways' trust model (deploy/certificates.md): the
// SPIFFE identities that name a cluster's gateway, the chain rule a
// certificate must pass to be believed (VerifyPeer), and the making of
// certificates that pass it (issuer.go). The gateway, coredns-mc certs and
// coredns-mc check all judge a certificate with it, so they judge alike.
// It imports nothing of mcmirror's but internal/labels.
package trust

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// DefaultTrustDomain is the trust domain of gateway identities unless
// configured otherwise.
const DefaultTrustDomain = "mcmirror.dev"

// Identity names a cluster's gateway in its certificate: a SPIFFE ID,
// spiffe://<trust domain>/cluster/<cluster>, as a URI SAN. Both sides of a
// connection carry one: the ingress learns from it which cluster a connection
// comes from, and the egress checks that it reached the cluster it dialled.
// The cluster's intermediate CA, which issues the certificate, carries the
// same ID (chain.go).
func Identity(trustDomain, cluster string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/cluster/" + cluster}
}

// TrustDomainID is the SPIFFE ID of the trust domain itself,
// spiffe://<trust domain>: the URI SAN of the root, so that what the root
// is for can be read from it.
func TrustDomainID(trustDomain string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain}
}

// RootTrustDomain returns the trust domain a root names with its
// TrustDomainID, and whether it names one.
func RootTrustDomain(root *x509.Certificate) (string, bool) {
	for _, u := range root.URIs {
		if u.Scheme == "spiffe" && u.Host != "" && (u.Path == "" || u.Path == "/") {
			return u.Host, true
		}
	}
	return "", false
}

// ClusterOf returns the cluster a verified certificate belongs to: the one
// named by its only spiffe URI SAN in trustDomain.
func ClusterOf(cert *x509.Certificate, trustDomain string) (string, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("certificate %q has %d spiffe URI SANs, want 1", cert.Subject.CommonName, len(found))
	}
	u := found[0]
	if u.Host != trustDomain {
		return "", fmt.Errorf("identity %s is not in trust domain %s", u, trustDomain)
	}
	name, ok := strings.CutPrefix(u.Path, "/cluster/")
	if !ok || strings.Contains(name, "/") {
		return "", fmt.Errorf("identity %s does not name a cluster (want spiffe://%s/cluster/NAME)", u, trustDomain)
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return "", fmt.Errorf("identity %s: %w", u, err)
	}
	return name, nil
}

package gateway

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"

	"github.com/mcmirror/mcmirror/gateway/issuer"
	"github.com/mcmirror/mcmirror/internal/labels"
)

// DefaultTrustDomain is the trust domain of gateway identities unless
// configured otherwise.
const DefaultTrustDomain = issuer.DefaultTrustDomain

// Identity names a cluster's gateway in its certificate: a SPIFFE ID,
// spiffe://<trust domain>/cluster/<cluster>, as a URI SAN. Both sides of a
// connection carry one: the ingress learns from it which cluster a connection
// comes from, and the egress checks that it reached the cluster it dialled.
// The cluster's intermediate CA, which issues the certificate, carries the
// same ID (see issuer.go).
func Identity(trustDomain, cluster string) *url.URL {
	return issuer.Identity(trustDomain, cluster)
}

// ClusterOf returns the cluster a verified certificate belongs to: the one
// named by its only spiffe URI SAN in trustDomain.
func ClusterOf(cert *x509.Certificate, trustDomain string) (string, error) {
	var found []string
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			found = append(found, u.String())
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("certificate %q has %d spiffe URI SANs, want 1", cert.Subject.CommonName, len(found))
	}
	u, _ := url.Parse(found[0])
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

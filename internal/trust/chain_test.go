package trust

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// certWith is a certificate of common name cn with the URI SANs uris.
func certWith(t *testing.T, cn string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotAfter: time.Unix(1000, 0)}
	for _, s := range uris {
		u, err := url.Parse(s)
		require.NoError(t, err)
		c.URIs = append(c.URIs, u)
	}
	return c
}

// The chain rule on its own, on chains as x509 Verify returns them: the
// certificate first, the root last.
func TestIssuerChainRule(t *testing.T) {
	cert := func(cn string, uris ...string) *x509.Certificate { return certWith(t, cn, uris...) }
	root := cert("root", "spiffe://mcmirror.dev")
	west, east := cert("west ca", "spiffe://mcmirror.dev/cluster/west"), cert("east ca", "spiffe://mcmirror.dev/cluster/east")
	leaf := cert("gateway.west", "spiffe://mcmirror.dev/cluster/west")
	for _, tc := range []struct {
		name   string
		chains [][]*x509.Certificate
		want   string // empty: accepted
		issuer string // the metric's peer label
	}{
		{"root, west's intermediate, west", [][]*x509.Certificate{{leaf, west, root}}, "", ""},
		{"issued by east's intermediate", [][]*x509.Certificate{{leaf, east, root}},
			`certificate for west issued by east's intermediate "east ca": a cluster's gateway certificate must be issued by its own cluster's intermediate`, "east"},
		{"issued by the root", [][]*x509.Certificate{{leaf, root}}, `certificate for west issued by the root "root" itself`, ""},
		{"through two intermediates", [][]*x509.Certificate{{leaf, west, east, root}},
			`certificate for west chains to the root through 2 intermediates ("west ca", "east ca"), not one`, "east"},
		{"intermediate without identity", [][]*x509.Certificate{{leaf, cert("anonymous ca"), root}},
			`certificate for west issued by intermediate "anonymous ca", which names no cluster`, ""},
		{"intermediate of another trust domain", [][]*x509.Certificate{{leaf, cert("x", "spiffe://example.org/cluster/west"), root}},
			"which names no cluster", ""},
		{"intermediate in the trust root file", [][]*x509.Certificate{{leaf, west}},
			`chains to west's intermediate "west ca", which the trust root file holds as a root`, "west"},
		{"an intermediate in the trust root file, above west's", [][]*x509.Certificate{{leaf, west, east}},
			`chains to east's intermediate "east ca", which the trust root file holds as a root`, "east"},
		{"the certificate in the trust root file", [][]*x509.Certificate{{leaf}}, "is itself in the trust root file", ""},
		{"one good chain of several", [][]*x509.Certificate{{leaf, root}, {leaf, west, root}}, "", ""},
		{"no chain", nil, "no verified chain", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain, err := AcceptedChain(tc.chains, "west", DefaultTrustDomain)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Len(t, chain, 3)
				return
			}
			require.ErrorContains(t, err, tc.want)
			var ie *IssuerError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, "west", ie.Cluster)
			assert.Equal(t, tc.issuer, ie.Issuer)
		})
	}
}

// VerifyPeer judges a chain as the ingress and the egress do.
func TestVerifyPeer(t *testing.T) {
	nb, na := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	root, err := NewRoot(DefaultTrustDomain, nb, na.Add(365*24*time.Hour))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert)
	// chainOf is west's certificate issued by ca, followed by ca unless
	// it is the root.
	chainOf := func(ca *CA) []*x509.Certificate {
		cert, _, err := ca.NewGateway(DefaultTrustDomain, "west", nb, na)
		require.NoError(t, err)
		if ca == root {
			return []*x509.Certificate{cert}
		}
		return []*x509.Certificate{cert, ca.Cert}
	}
	intermediate := func(cluster string) *CA {
		ca, err := root.NewIntermediate(DefaultTrustDomain, cluster, nb, na.Add(90*24*time.Hour))
		require.NoError(t, err)
		return ca
	}
	legit := chainOf(intermediate("west"))
	require.Len(t, legit, 2, "the certificate, then its intermediate")
	cluster, err := VerifyPeer(legit, roots, DefaultTrustDomain, time.Time{}, x509.ExtKeyUsageServerAuth)
	require.NoError(t, err)
	assert.Equal(t, "west", cluster)
	_, err = VerifyPeer(legit, roots, DefaultTrustDomain, time.Now().Add(48*time.Hour), x509.ExtKeyUsageServerAuth)
	assert.ErrorContains(t, err, "expired")
	_, err = VerifyPeer(chainOf(intermediate("east")), roots, DefaultTrustDomain, time.Time{}, x509.ExtKeyUsageClientAuth)
	assert.ErrorContains(t, err, "certificate for west issued by east's intermediate")
	_, err = VerifyPeer(chainOf(root), roots, DefaultTrustDomain, time.Time{}, x509.ExtKeyUsageClientAuth)
	assert.ErrorContains(t, err, "issued by the root")
	_, err = VerifyPeer(nil, roots, DefaultTrustDomain, time.Time{}, x509.ExtKeyUsageClientAuth)
	assert.Error(t, err)
}

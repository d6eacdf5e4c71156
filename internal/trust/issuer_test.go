package trust

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The three templates say what deploy/certificates.md says they are.
func TestTemplates(t *testing.T) {
	nb, na := time.Now(), time.Now().Add(time.Hour)
	root := RootTemplate("example.org", nb, na)
	assert.True(t, root.IsCA)
	assert.Equal(t, 1, root.MaxPathLen, "the root signs intermediates, nothing deeper")
	assert.Equal(t, x509.KeyUsageCertSign, root.KeyUsage&x509.KeyUsageCertSign)
	assert.Equal(t, "spiffe://example.org", root.URIs[0].String())

	in := IntermediateTemplate("example.org", "west", nb, na)
	assert.True(t, in.IsCA && in.BasicConstraintsValid)
	assert.Equal(t, 0, in.MaxPathLen)
	assert.True(t, in.MaxPathLenZero, "path length zero is written, not left out")
	assert.Equal(t, x509.KeyUsageCertSign, in.KeyUsage&x509.KeyUsageCertSign)
	assert.Equal(t, "spiffe://example.org/cluster/west", in.URIs[0].String())

	gw := GatewayTemplate("example.org", "west", nb, na)
	assert.False(t, gw.IsCA)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, gw.ExtKeyUsage)
	assert.Equal(t, "spiffe://example.org/cluster/west", gw.URIs[0].String())
	assert.NotEqual(t, gw.SerialNumber, GatewayTemplate("example.org", "west", nb, na).SerialNumber)
}

// Root → intermediate → gateway verifies, and the root's path length
// stops a CA below an intermediate.
func TestChain(t *testing.T) {
	nb, na := time.Now().Add(-Backdate), time.Now().Add(time.Hour)
	root, err := NewRoot(DefaultTrustDomain, nb, na)
	require.NoError(t, err)
	td, ok := RootTrustDomain(root.Cert)
	require.True(t, ok)
	assert.Equal(t, DefaultTrustDomain, td)
	west, err := root.NewIntermediate(DefaultTrustDomain, "west", nb, na)
	require.NoError(t, err)
	leaf, key, err := west.NewGateway(DefaultTrustDomain, "west", nb, na)
	require.NoError(t, err)

	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root.Cert)
	inters.AddCert(west.Cert)
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	require.Len(t, chains, 1)
	assert.Len(t, chains[0], 3)

	// What a CA made by the intermediate issues is refused by x509
	// already: the path lengths.
	deeperKey, err := NewKey()
	require.NoError(t, err)
	deeper, err := Sign(IntermediateTemplate(DefaultTrustDomain, "west", nb, na), deeperKey.Public(), west)
	require.NoError(t, err)
	inters.AddCert(deeper)
	below, _, err := (&CA{Cert: deeper, Key: deeperKey}).NewGateway(DefaultTrustDomain, "west", nb, na)
	require.NoError(t, err)
	_, err = below.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	assert.ErrorContains(t, err, "too many intermediates")

	// PEM round trips; ParseCA wants a CA and its own key.
	keyPEM, err := KeyPEM(key)
	require.NoError(t, err)
	_, _, err = ParseCA(CertPEM(leaf, west.Cert), keyPEM)
	require.ErrorContains(t, err, "is not a CA")
	_, _, err = ParseCA(CertPEM(west.Cert), keyPEM)
	require.ErrorContains(t, err, "private key does not match")
	westKey, err := KeyPEM(west.Key)
	require.NoError(t, err)
	ca, rest, err := ParseCA(CertPEM(west.Cert, root.Cert), westKey)
	require.NoError(t, err)
	assert.True(t, ca.Cert.Equal(west.Cert))
	require.Len(t, rest, 1)
	assert.True(t, rest[0].Equal(root.Cert))
	certs, err := ParseCertificates(CertPEM(leaf, west.Cert))
	require.NoError(t, err)
	assert.Len(t, certs, 2)
	_, err = ParseCertificates([]byte("nothing"))
	assert.ErrorContains(t, err, "no PEM certificate")
}

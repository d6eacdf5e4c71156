package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// issueWithUsages writes into dir a certificate of cluster from the root
// ca's intermediate of cluster with these extended key usages, its key and
// the root, and returns their files.
func issueWithUsages(t *testing.T, ca *gatewaytest.CA, dir, cluster string, usages ...x509.ExtKeyUsage) CertFiles {
	t.Helper()
	inter, err := ca.Intermediate(cluster, gatewaytest.Options{})
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "gateway." + cluster},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		URIs:         []*url.URL{trust.Identity(trust.DefaultTrustDomain, cluster)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter.Cert, &key.PublicKey, inter.Key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	files := CertFiles{Cert: filepath.Join(dir, cluster+".crt"), Key: filepath.Join(dir, cluster+".key"), CA: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.WriteFile(files.Cert, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), inter.CertPEM...), 0o600))
	require.NoError(t, os.WriteFile(files.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	require.NoError(t, os.WriteFile(files.CA, ca.CertPEM, 0o600))
	return files
}

// The gateway's certificate serves as server (ingress) and as client
// (egress, probes): one without both usages is refused at start-up, with
// the usage it lacks named, rather than refused by every peer later. One
// without extended key usages at all is valid for any.
func TestLoadCertsChecksBothUsages(t *testing.T) {
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		usages []x509.ExtKeyUsage
		want   string // empty: loads
	}{
		{"both", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, ""},
		{"none given: any", nil, ""},
		{"any", []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, ""},
		{"client only", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, "not valid for server authentication (extended key usage serverAuth)"},
		{"server only", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "not valid for client authentication (extended key usage clientAuth)"},
		{"neither", []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}, "not valid for server authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := issueWithUsages(t, ca, t.TempDir(), "east", tc.usages...)
			c, err := LoadCerts(files)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "east", c.Cluster())
				return
			}
			require.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, files.Cert)
		})
	}
}

// A reload to a certificate that lacks a usage is refused like any bad
// set: the previous one stays in use.
func TestReloadChecksBothUsages(t *testing.T) {
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	dir := t.TempDir()
	files := issueWithUsages(t, ca, dir, "east", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	c, err := LoadCerts(files)
	require.NoError(t, err)
	issueWithUsages(t, ca, dir, "east", x509.ExtKeyUsageClientAuth)
	reloadRefused(t, c, "not valid for server authentication")
}

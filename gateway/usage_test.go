package gateway

import (
	"crypto/x509"
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
	key, err := trust.NewKey()
	require.NoError(t, err)
	now := time.Now()
	tmpl := trust.GatewayTemplate(trust.DefaultTrustDomain, cluster, now.Add(-time.Hour), now.Add(time.Hour))
	tmpl.ExtKeyUsage = usages
	cert, err := trust.Sign(tmpl, key.Public(), &trust.CA{Cert: inter.Cert, Key: inter.Key})
	require.NoError(t, err)
	keyPEM, err := trust.KeyPEM(key)
	require.NoError(t, err)
	is := &gatewaytest.Issued{CertPEM: trust.CertPEM(cert, inter.Cert), KeyPEM: keyPEM}
	f, err := inter.Write(dir, cluster, is)
	require.NoError(t, err)
	return CertFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}
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

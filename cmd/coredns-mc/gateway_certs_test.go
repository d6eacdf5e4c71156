package main

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A certificate for one use only passes no start-up: the gateway presents
// it as server (ingress) and as client (egress, probes), and its peers
// check both. The one line names the usage it lacks.
func TestGatewayRefusesCertificateWithoutBothUsages(t *testing.T) {
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	for _, tc := range []struct {
		usage x509.ExtKeyUsage
		want  string
	}{
		{x509.ExtKeyUsageClientAuth, "not valid for server authentication (extended key usage serverAuth)"},
		{x509.ExtKeyUsageServerAuth, "not valid for client authentication (extended key usage clientAuth)"},
	} {
		dir := t.TempDir()
		key, err := trust.NewKey()
		require.NoError(t, err)
		tmpl := trust.GatewayTemplate(trust.DefaultTrustDomain, "east", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{tc.usage}
		cert, err := trust.Sign(tmpl, &key.PublicKey, &trust.CA{Cert: ca.Cert, Key: ca.Key})
		require.NoError(t, err)
		keyPEM, err := trust.KeyPEM(key)
		require.NoError(t, err)
		crt, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
		require.NoError(t, os.WriteFile(crt, trust.CertPEM(cert), 0o600))
		require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
		require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))

		var code int
		out := stderrOf(t, func() {
			code = runGateway([]string{"--cluster", "east", "--tls-cert", crt, "--tls-key", keyFile, "--tls-ca", caFile})
		})
		assert.Equal(t, 2, code)
		assert.Contains(t, out, "certificates: "+crt+": "+tc.want)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	}
}

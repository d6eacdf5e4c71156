package main

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
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"

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
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "gateway.east"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{tc.usage},
			URIs:         []*url.URL{{Scheme: "spiffe", Host: "mcmirror.dev", Path: "/cluster/east"}},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		crt, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
		require.NoError(t, os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
		require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
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

package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

// certsRun runs `coredns-mc certs args` and returns its exit code, stdout
// and stderr.
func certsRun(args ...string) (int, string, string) {
	run := func(args []string, stdout, stderr io.Writer) int { return runCerts(args, stdout, stderr, time.Now) }
	return runWith(run, args...)
}

// mustCerts runs `coredns-mc certs args` and wants it to succeed; it
// returns stdout.
func mustCerts(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := certsRun(args...)
	require.Equal(t, 0, code, "certs %q: %s", args, stderr)
	return stdout
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// dirFiles lists dir's names and modes: no temporary file is left behind.
func dirFiles(t *testing.T, dir string) map[string]os.FileMode {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]os.FileMode{}
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		out[e.Name()] = info.Mode().Perm()
	}
	return out
}

func certsOf(t *testing.T, path string) []*x509.Certificate {
	t.Helper()
	certs, err := trust.ParseCertificates(readFile(t, path))
	require.NoError(t, err)
	return certs
}

// secretHolds reads the one Secret of a manifest and wants it to be
// mcmirror/name, holding the files of dir.
func secretHolds(t *testing.T, manifest, name, dir string) {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&s), manifest)
	assert.Equal(t, "v1", s.APIVersion)
	assert.Equal(t, "Secret", s.Kind)
	assert.Equal(t, corev1.SecretTypeTLS, s.Type)
	assert.Equal(t, []string{"ca.crt", "tls.crt", "tls.key"}, slices.Sorted(maps.Keys(s.Data)))
	assert.Equal(t, "mcmirror/"+name, s.Namespace+"/"+s.Name)
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		assert.Equal(t, readFile(t, filepath.Join(dir, k)), s.Data[k], k)
	}
}

// fleetCerts is what deploy/certificates.md has a user run for east and
// west: the root, each cluster's intermediate, each gateway's certificate.
type fleetCerts struct {
	root     string            // the root's directory
	ca, gw   map[string]string // each cluster's intermediate and gateway directories
	caSecret map[string]string // the intermediate's Secret, as printed
	gwSecret map[string]string // the gateway's Secret, as printed
}

func makeFleetCerts(t *testing.T) *fleetCerts {
	t.Helper()
	dir := t.TempDir()
	f := &fleetCerts{root: filepath.Join(dir, "root"), ca: map[string]string{}, gw: map[string]string{},
		caSecret: map[string]string{}, gwSecret: map[string]string{}}
	assert.Empty(t, mustCerts(t, "root", "--out", f.root))
	for _, c := range []string{"east", "west"} {
		f.ca[c], f.gw[c] = filepath.Join(dir, c+"-ca"), filepath.Join(dir, c+"-gateway")
		f.caSecret[c] = mustCerts(t, "cluster", "--root", f.root, "--cluster", c, "--out", f.ca[c], "--secret-name", "mcmirror-gateway-ca")
		// --secret, or the Secret's name and namespace (README.md's way):
		// the same Secret.
		secret := []string{"--secret"}
		if c == "west" {
			secret = []string{"--secret-name", "mcmirror-gateway-tls", "--namespace", "mcmirror"}
		}
		f.gwSecret[c] = mustCerts(t, append([]string{"gateway", "--issuer", f.ca[c], "--cluster", c, "--out", f.gw[c]}, secret...)...)
	}
	return f
}

func (f *fleetCerts) files(cluster string) gateway.CertFiles {
	d := f.gw[cluster]
	return gateway.CertFiles{Cert: filepath.Join(d, "tls.crt"), Key: filepath.Join(d, "tls.key"), CA: filepath.Join(d, "ca.crt")}
}

// The three steps for two clusters write what deploy/certificates.md
// says, with the modes it says, and the Secrets hold the same files.
func TestCertsSteps(t *testing.T) {
	f := makeFleetCerts(t)
	assert.Equal(t, map[string]os.FileMode{"root.crt": 0o644, "root.key": 0o600}, dirFiles(t, f.root))
	root := certsOf(t, filepath.Join(f.root, "root.crt"))
	require.Len(t, root, 1)
	assert.True(t, root[0].IsCA)
	assert.NoError(t, root[0].CheckSignatureFrom(root[0]), "self-signed")
	td, ok := trust.RootTrustDomain(root[0])
	assert.True(t, ok)
	assert.Equal(t, "mcmirror.dev", td)
	assert.WithinDuration(t, time.Now().Add(87600*time.Hour), root[0].NotAfter, time.Minute)

	for _, c := range []string{"east", "west"} {
		// The intermediate: a CA naming c, signed by the root, that
		// signs nothing but end certificates.
		assert.Equal(t, map[string]os.FileMode{"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}, dirFiles(t, f.ca[c]))
		inter := certsOf(t, filepath.Join(f.ca[c], "tls.crt"))
		require.Len(t, inter, 1)
		assert.True(t, inter[0].IsCA)
		assert.Equal(t, 0, inter[0].MaxPathLen)
		assert.True(t, inter[0].MaxPathLenZero)
		assert.NotZero(t, inter[0].KeyUsage&x509.KeyUsageCertSign)
		assert.Equal(t, "spiffe://mcmirror.dev/cluster/"+c, inter[0].URIs[0].String())
		assert.NoError(t, inter[0].CheckSignatureFrom(root[0]))
		assert.WithinDuration(t, time.Now().Add(8760*time.Hour), inter[0].NotAfter, time.Minute)
		assert.Equal(t, readFile(t, filepath.Join(f.root, "root.crt")), readFile(t, filepath.Join(f.ca[c], "ca.crt")))
		secretHolds(t, f.caSecret[c], "mcmirror-gateway-ca", f.ca[c])

		// The gateway's: the certificate then the intermediate, the
		// root as ca.crt; it loads as a gateway's.
		assert.Equal(t, map[string]os.FileMode{"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}, dirFiles(t, f.gw[c]))
		chain := certsOf(t, filepath.Join(f.gw[c], "tls.crt"))
		require.Len(t, chain, 2)
		assert.Equal(t, "spiffe://mcmirror.dev/cluster/"+c, chain[0].URIs[0].String())
		assert.False(t, chain[0].IsCA)
		assert.True(t, chain[1].Equal(inter[0]), "the intermediate follows the certificate")
		assert.WithinDuration(t, time.Now().Add(2160*time.Hour), chain[0].NotAfter, time.Minute)
		assert.Equal(t, readFile(t, filepath.Join(f.root, "root.crt")), readFile(t, filepath.Join(f.gw[c], "ca.crt")))
		secretHolds(t, f.gwSecret[c], "mcmirror-gateway-tls", f.gw[c]) // the Secret deploy/gateway.yaml mounts
		certs, err := gateway.LoadCerts(f.files(c))
		require.NoError(t, err)
		assert.Equal(t, c, certs.Cluster())
	}

	// --secret-file: the Secret in a file of its own, 0600, not on
	// stdout; renewing with --force replaces the certificate.
	secretFile := filepath.Join(t.TempDir(), "east-gateway.yaml")
	old := certsOf(t, filepath.Join(f.gw["east"], "tls.crt"))[0]
	assert.Empty(t, mustCerts(t, "gateway", "--issuer", f.ca["east"], "--cluster", "east", "--out", f.gw["east"], "--force", "--secret-file", secretFile))
	assert.Equal(t, map[string]os.FileMode{"east-gateway.yaml": 0o600}, dirFiles(t, filepath.Dir(secretFile)))
	renewed := certsOf(t, filepath.Join(f.gw["east"], "tls.crt"))[0]
	assert.NotEqual(t, old.SerialNumber, renewed.SerialNumber)
	secretHolds(t, string(readFile(t, secretFile)), "mcmirror-gateway-tls", f.gw["east"])
	assert.Equal(t, map[string]os.FileMode{"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}, dirFiles(t, f.gw["east"]))
}

// What the commands refuse, with the exit code and one line that says
// what is wrong; nothing is written then.
func TestCertsRefusals(t *testing.T) {
	f := makeFleetCerts(t)
	dir := t.TempDir()
	rootKey := readFile(t, filepath.Join(f.root, "root.key"))
	// A directory holding the root where an intermediate should be.
	rootAsIssuer := filepath.Join(dir, "root-as-issuer")
	require.NoError(t, os.MkdirAll(rootAsIssuer, 0o700))
	for dst, src := range map[string]string{"tls.crt": "root.crt", "tls.key": "root.key", "ca.crt": "root.crt"} {
		require.NoError(t, os.WriteFile(filepath.Join(rootAsIssuer, dst), readFile(t, filepath.Join(f.root, src)), 0o600))
	}
	out := filepath.Join(dir, "out")

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "want a step"},
		{[]string{"intermediate"}, 2, `unknown step "intermediate"`},
		{[]string{"root"}, 2, "coredns-mc certs root: --out is required"},
		{[]string{"root", "--out", out, "--trust-domain", "Not_A_Domain"}, 2, `--trust-domain: invalid trust domain "Not_A_Domain"`},
		{[]string{"root", "--out", out, "--valid", "0s"}, 2, "--valid must be positive"},
		{[]string{"root", "--out", out, "extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"root", "--out", f.root}, 1, "refusing to overwrite " + filepath.Join(f.root, "root.crt") + ", " + filepath.Join(f.root, "root.key") + ": a root is never replaced"},
		{[]string{"cluster", "--root", f.root, "--out", out}, 2, "--cluster is required"},
		{[]string{"cluster", "--root", f.root, "--cluster", "West", "--out", out}, 2, `--cluster: invalid cluster name "West"`},
		{[]string{"cluster", "--root", f.root, "--cluster", "global", "--out", out}, 2, "reserved for the global names"},
		{[]string{"cluster", "--root", f.ca["east"], "--cluster", "paris", "--out", out}, 1, "--root is the directory 'coredns-mc certs root' wrote"},
		{[]string{"cluster", "--root", f.root, "--cluster", "paris", "--out", out, "--secret-file", "x.yaml"}, 2, "give --secret-name too"},
		{[]string{"cluster", "--root", f.root, "--cluster", "paris", "--out", out, "--secret-name", "Bad_Name"}, 2, `--secret-name: invalid Secret name "Bad_Name"`},
		{[]string{"cluster", "--root", f.root, "--cluster", "paris", "--out", out, "--trust-domain", "example.org"}, 2, "--trust-domain example.org, but the root is of trust domain mcmirror.dev"},
		{[]string{"cluster", "--root", f.root, "--cluster", "east", "--out", f.ca["east"]}, 1, "give --force to replace them"},
		{[]string{"gateway", "--issuer", f.ca["east"], "--cluster", "west", "--out", out}, 2,
			"--cluster west, but " + f.ca["east"] + " holds east's intermediate: a cluster's gateway certificate is issued by its own cluster's intermediate"},
		{[]string{"gateway", "--issuer", f.root, "--cluster", "east", "--out", out}, 1, "--issuer is the directory 'coredns-mc certs cluster' wrote"},
		{[]string{"gateway", "--issuer", rootAsIssuer, "--cluster", "east", "--out", out}, 1, "is a root: a gateway certificate is issued by its cluster's intermediate"},
		{[]string{"gateway", "--issuer", f.ca["east"], "--cluster", "east", "--out", out, "--namespace", "Bad_NS"}, 2, `--namespace: invalid namespace "Bad_NS"`},
		{[]string{"gateway", "--issuer", f.ca["east"], "--cluster", "east", "--out", out, "--ca-bundle", filepath.Join(f.ca["east"], "tls.crt")}, 1,
			"with --ca-bundle " + filepath.Join(f.ca["east"], "tls.crt") + ": "},
		{[]string{"gateway", "--issuer", f.ca["east"], "--cluster", "east", "--out", f.gw["east"]}, 1, "refusing to overwrite"},
	} {
		code, stdout, stderr := certsRun(tc.args...)
		assert.Equal(t, tc.code, code, "%q: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line for %q: %q", tc.args, stderr)
		assert.Empty(t, stdout, "%q", tc.args)
	}
	_, err := os.Stat(out)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing written for a refusal")
	assert.Equal(t, rootKey, readFile(t, filepath.Join(f.root, "root.key")), "the root's key is never replaced")

	for _, step := range []string{"-h", "root -h", "cluster -h", "gateway -h"} {
		code, _, stderr := certsRun(strings.Fields(step)...)
		assert.Equal(t, 0, code, step)
		assert.Contains(t, stderr, "usage: coredns-mc certs", step)
	}
}

// A certificate asked for longer than its issuer lives ends with it, and
// says so.
func TestCertsValidityCutToIssuer(t *testing.T) {
	dir := t.TempDir()
	root, ca, gw := filepath.Join(dir, "root"), filepath.Join(dir, "ca"), filepath.Join(dir, "gw")
	mustCerts(t, "root", "--out", root, "--valid", "48h")
	code, _, stderr := certsRun("cluster", "--root", root, "--cluster", "east", "--out", ca, "--valid", "72h")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "the root expires at")
	code, _, stderr = certsRun("gateway", "--issuer", ca, "--cluster", "east", "--out", gw)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "east's intermediate expires at")
	rootCert := certsOf(t, filepath.Join(root, "root.crt"))[0]
	chain := certsOf(t, filepath.Join(gw, "tls.crt"))
	assert.True(t, rootCert.NotAfter.Equal(chain[1].NotAfter), "the intermediate ends with the root")
	assert.True(t, rootCert.NotAfter.Equal(chain[0].NotAfter), "the certificate ends with the intermediate")
}

// A gateway started with the files the commands wrote works: east's
// egress (runGateway, as in a pod) carries a stream to west's ingress and
// back. And east's intermediate, which a user of east's cluster holds,
// cannot make a certificate that west's ingress takes as west's.
func TestCertsMadeGatewaysWork(t *testing.T) {
	f := makeFleetCerts(t)
	westAddr := westIngress(t, f.files("west"), echoTarget(t))
	// East's egress, runGateway itself, stopped by SIGTERM at the end.
	east := f.files("east")
	egressAddr, _, _, _ := egressTo(t, 20*time.Second, westAddr, []string{"--tls-cert", east.Cert, "--tls-key", east.Key, "--tls-ca", east.CA},
		"--drain-delay", "0s", "--shutdown-grace", "1s")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		c, _, err := greeted(egressAddr)
		require.NoError(ct, err)
		c.Close()
	}, 30*time.Second, 50*time.Millisecond, "a stream through east's egress and west's ingress")

	// East's intermediate signs a certificate naming west: west's
	// ingress refuses it.
	caPEM, keyPEM := readFile(t, filepath.Join(f.ca["east"], "tls.crt")), readFile(t, filepath.Join(f.ca["east"], "tls.key"))
	eastCA, _, err := trust.ParseCA(caPEM, keyPEM)
	require.NoError(t, err)
	forged, forgedKey, err := eastCA.NewGateway("mcmirror.dev", "west", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	raw, err := net.DialTimeout("tcp", westAddr, 5*time.Second)
	require.NoError(t, err)
	defer raw.Close()
	tc := tls.Client(raw, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		Certificates: []tls.Certificate{{Certificate: [][]byte{forged.Raw, eastCA.Cert.Raw}, PrivateKey: forgedKey}}})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err = tc.Handshake(); err == nil {
		_, _ = io.WriteString(tc, "CONNECT web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n")
		_, err = tc.Read(make([]byte, 1))
	}
	require.ErrorContains(t, err, "bad certificate")
}

package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deeperChain makes a certificate of cluster issued through two
// intermediates that both name it, under a root without path length limits
// (so that x509 verifies the chain and only the chain rule refuses it), and
// returns its chain, its key and the root, PEM-encoded.
func deeperChain(t *testing.T, cluster string) (certPEM, keyPEM, rootPEM []byte) {
	t.Helper()
	now := time.Now().Add(-time.Hour)
	key, err := trust.NewKey()
	require.NoError(t, err)
	tmpl := trust.RootTemplate(trust.DefaultTrustDomain, now, now.Add(48*time.Hour))
	tmpl.MaxPathLen = -1
	rootCert, err := trust.SelfSign(tmpl, key)
	require.NoError(t, err)
	parent := &trust.CA{Cert: rootCert, Key: key}
	var inters []*x509.Certificate
	for range 2 {
		k, err := trust.NewKey()
		require.NoError(t, err)
		it := trust.IntermediateTemplate(trust.DefaultTrustDomain, cluster, now, now.Add(48*time.Hour))
		it.MaxPathLen, it.MaxPathLenZero = -1, false
		c, err := trust.Sign(it, k.Public(), parent)
		require.NoError(t, err)
		inters = append([]*x509.Certificate{c}, inters...)
		parent = &trust.CA{Cert: c, Key: k}
	}
	leaf, leafKey, err := parent.NewGateway(trust.DefaultTrustDomain, cluster, now, now.Add(24*time.Hour))
	require.NoError(t, err)
	keyPEM, err = trust.KeyPEM(leafKey)
	require.NoError(t, err)
	return trust.CertPEM(append([]*x509.Certificate{leaf}, inters...)...), keyPEM, trust.CertPEM(rootCert)
}

// ingressRefuses presents cfg's certificate to the ingress at addr and
// returns the error the connection ends with; nil if the ingress took the
// request.
func ingressRefuses(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	c := dialTLS(t, addr, cfg)
	// In TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: the refusal arrives on the first read.
	if err := c.Handshake(); err != nil {
		return err
	}
	if _, err := io.WriteString(c, connectRequest("web.default:80")); err != nil {
		return err
	}
	_, err := c.Read(make([]byte, 1))
	return err
}

// West's ingress takes east's certificate, issued by east's intermediate,
// and refuses every other one that names east though it chains to the
// same root: issued by west's intermediate (what west's credentials could
// forge), by paris's, by the root itself, or through two intermediates.
// Each is counted as issuer_mismatch under the cluster whose intermediate
// made it.
func TestIngressRefusesCertificatesNotFromTheirClustersIntermediate(t *testing.T) {
	p := newPair(t)
	fromWest := issue(t, p.ca, "east", gatewaytest.Options{Issuer: "west"})
	fromParis := issue(t, p.ca, "east", gatewaytest.Options{Issuer: "paris"})
	fromRoot := issue(t, p.ca, "east", gatewaytest.Options{FromRoot: true})
	legit := issue(t, p.ca, "east", gatewaytest.Options{})

	// The legitimate one, as positive evidence: the request is read and
	// answered.
	resp, _ := connect(t, dialIngress(t, p.ingressAddr, clientTLS(t, legit)), connectRequest("nothing.default:80"))
	assert.Equal(t, 403, resp.StatusCode)
	assert.Equal(t, string(ReasonNotExported), resp.Header.Get("X-Mcmirror-Reason"))

	for _, tc := range []struct {
		name   string
		is     *gatewaytest.Issued
		issuer string
	}{
		{"issued by west's intermediate", fromWest, "west"},
		{"issued by paris's intermediate", fromParis, "paris"},
		{"issued by the root", fromRoot, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusals(tc.issuer, DirectionIngress, ReasonIssuerMismatch)
			failures := value(handshakeFailures.WithLabelValues(DirectionIngress))
			err := ingressRefuses(t, p.ingressAddr, clientTLS(t, tc.is))
			require.ErrorContains(t, err, "bad certificate")
			assert.Equal(t, before+1, refusals(tc.issuer, DirectionIngress, ReasonIssuerMismatch))
			requireValue(t, handshakeFailures.WithLabelValues(DirectionIngress), failures+1)
		})
	}

	// A chain through two intermediates, each naming east, under a root
	// of the ingress's bundle that sets no path length.
	t.Run("through two intermediates", func(t *testing.T) {
		certPEM, keyPEM, rootPEM := deeperChain(t, "east")
		writeFile(t, filepath.Join(p.dir, "ca.crt"), append(append([]byte{}, p.ca.CertPEM...), rootPEM...))
		reloaded(t, p.west)
		before := refusals("east", DirectionIngress, ReasonIssuerMismatch)
		err := ingressRefuses(t, p.ingressAddr, clientTLS(t, &gatewaytest.Issued{CertPEM: certPEM, KeyPEM: keyPEM}))
		require.ErrorContains(t, err, "bad certificate")
		assert.Equal(t, before+1, refusals("east", DirectionIngress, ReasonIssuerMismatch))
	})
}

// The egress (and the prober) verify the ingress they dial by the same
// rule: a server certificate naming west but issued by east's
// intermediate, which east's credentials can make, is not west's ingress.
// The client is reset and the handshake failure counted.
func TestEgressRefusesIngressNotFromItsClustersIntermediate(t *testing.T) {
	// The fake ingress presents whatever forged holds.
	var forged atomic.Pointer[tls.Certificate]
	p := newPair(t, func(_ *Ingress, e *Egress) {
		fake := startServer(t, func(c net.Conn) {
			srv := tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return forged.Load(), nil
			}})
			_ = srv.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, srv)
		})
		e.Peers = StaticPeers{"west": fake.addr.String()}
	})
	is := issue(t, p.ca, "west", gatewaytest.Options{Issuer: "east"})
	cert, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	require.NoError(t, err)
	forged.Store(&cert)

	// The rule itself, as the egress's configuration applies it.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		_ = tls.Server(b, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}).Handshake()
	}()
	cli := tls.Client(a, p.east.ClientConfig("west", nil))
	_ = cli.SetDeadline(time.Now().Add(10 * time.Second))
	err = cli.Handshake()
	require.ErrorContains(t, err, "certificate for west issued by east's intermediate")
	var ie *trust.IssuerError
	require.True(t, errors.As(err, &ie), "%v", err)

	// Through the egress: the client is reset, the handshake counted.
	port := p.mirror(t, "web", "", 80)
	before := refusals("west", DirectionEgress, ReasonHandshake)
	requireDialReset(t, egressAddr(port))
	require.Eventually(t, func() bool { return refusals("west", DirectionEgress, ReasonHandshake) == before+1 }, 5*time.Second, 5*time.Millisecond)
}

// A gateway's own files pass the rule too, at start-up and at every
// reload: a mistake shows at once, with what is wrong and how to fix it,
// and a reload to such files keeps the previous ones.
func TestLoadCertsRefusesCertificateNotFromItsClustersIntermediate(t *testing.T) {
	ca, files, c := loadIssued(t, "west")

	writeSet := func(t *testing.T, sub string, certPEM, keyPEM, caPEM []byte) CertFiles {
		t.Helper()
		d := filepath.Join(t.TempDir(), sub)
		require.NoError(t, os.MkdirAll(d, 0o700))
		f := CertFiles{Cert: filepath.Join(d, "tls.crt"), Key: filepath.Join(d, "tls.key"), CA: filepath.Join(d, "ca.crt")}
		writeFile(t, f.Cert, certPEM)
		writeFile(t, f.Key, keyPEM)
		writeFile(t, f.CA, caPEM)
		return f
	}
	forged := issue(t, ca, "west", gatewaytest.Options{Issuer: "east"})
	fromRoot := issue(t, ca, "west", gatewaytest.Options{FromRoot: true})
	deepCert, deepKey, deepRoot := deeperChain(t, "west")
	westCA, err := ca.Intermediate("west", gatewaytest.Options{})
	require.NoError(t, err)
	inBundle := issue(t, westCA, "west", gatewaytest.Options{})
	alone := issue(t, westCA, "west", gatewaytest.Options{})
	// The certificate without the intermediate that follows it.
	aloneFiles := writeSet(t, "alone", alone.CertPEM[:len(alone.CertPEM)-len(westCA.CertPEM)], alone.KeyPEM, ca.CertPEM)
	for _, tc := range []struct {
		name  string
		files CertFiles
		want  string
	}{
		{"issued by east's intermediate", writeSet(t, "forged", forged.CertPEM, forged.KeyPEM, ca.CertPEM),
			"tls.crt: certificate for west issued by east's intermediate"},
		{"issued by the root", writeSet(t, "root", fromRoot.CertPEM, fromRoot.KeyPEM, ca.CertPEM),
			"tls.crt: certificate for west issued by the root \"root\" itself"},
		{"through two intermediates", writeSet(t, "deep", deepCert, deepKey, deepRoot),
			"chains to the root through 2 intermediates"},
		// What a cert-manager CA Issuer whose Secret lacks the root
		// would write: the intermediate as ca.crt.
		{"intermediate as the trust root", writeSet(t, "bundle", inBundle.CertPEM, inBundle.KeyPEM, westCA.CertPEM),
			"which the trust root file holds as a root"},
		{"intermediate missing from the chain", aloneFiles,
			"does not chain to " + aloneFiles.CA + " (it holds the certificate alone: its cluster's intermediate must follow it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCerts(tc.files)
			require.ErrorContains(t, err, tc.want)

			// And as a reload: refused, counted, the old set kept.
			for src, dst := range map[string]string{tc.files.Cert: files.Cert, tc.files.Key: files.Key, tc.files.CA: files.CA} {
				b, err := os.ReadFile(src)
				require.NoError(t, err)
				writeFile(t, dst, b)
			}
			reloadRefused(t, c, "")
		})
	}
}

// The expiry gauge, and CheckCertificates, give the earliest NotAfter of
// the certificate and its intermediate: a certificate valid for longer
// than the intermediate that issued it stops verifying with it.
func TestCertExpiryIsTheChains(t *testing.T) {
	dir := t.TempDir()
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	interEnd := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	leafEnd := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	westCA, err := ca.Intermediate("west", gatewaytest.Options{NotAfter: interEnd})
	require.NoError(t, err)
	files, err := westCA.IssueFiles(dir, "west", gatewaytest.Options{NotAfter: leafEnd})
	require.NoError(t, err)
	c := load(t, files)
	assert.Equal(t, float64(interEnd.Unix()), value(certExpiry), "the intermediate's end, not the certificate's")

	// A certificate that ends first: its own end.
	shortEnd := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	_, err = westCA.IssueFiles(dir, "west", gatewaytest.Options{NotAfter: shortEnd})
	require.NoError(t, err)
	reloaded(t, c)
	assert.Equal(t, float64(shortEnd.Unix()), value(certExpiry))

	is := issue(t, westCA, "west", gatewaytest.Options{NotAfter: leafEnd})
	cluster, expiry, err := CheckCertificates(is.CertPEM, is.KeyPEM, ca.CertPEM, "")
	require.NoError(t, err)
	assert.Equal(t, "west", cluster)
	assert.True(t, interEnd.Equal(expiry), "expiry %s, want %s", expiry, interEnd)
}

// A rotation of the root: with both roots in every gateway's trust file,
// a gateway whose certificate comes through the new root's intermediate
// and one still on the old root's talk both ways, and each reloads its
// files without a restart.
func TestRootRotationWithBundle(t *testing.T) {
	dir := t.TempDir()
	oldRoot, err := gatewaytest.NewCA("old root")
	require.NoError(t, err)
	newRoot, err := gatewaytest.NewCA("new root")
	require.NoError(t, err)
	eastFiles, err := oldRoot.IssueFiles(dir, "east", gatewaytest.Options{})
	require.NoError(t, err)
	westFiles, err := oldRoot.IssueFiles(dir, "west", gatewaytest.Options{})
	require.NoError(t, err)
	east, west := load(t, eastFiles), load(t, westFiles)
	require.NotNil(t, clientSerial(t, east, west))

	// 1. The bundle, everywhere (both read the one ca.crt here).
	writeFile(t, eastFiles.CA, append(append([]byte{}, oldRoot.CertPEM...), newRoot.CertPEM...))
	reloaded(t, east)
	reloaded(t, west)
	// 2. West moves to the new root's intermediate; east has not yet.
	is := issue(t, newRoot, "west", gatewaytest.Options{})
	writeFile(t, westFiles.Cert, is.CertPEM)
	writeFile(t, westFiles.Key, is.KeyPEM)
	reloaded(t, west)
	require.NotNil(t, clientSerial(t, east, west), "east (old root) to west (new root)")
	assert.Equal(t, parseCert(t, is.CertPEM).SerialNumber, clientSerial(t, west, east), "west (new root) to east (old root)")
	// A forgery under the new root is still one.
	forged := issue(t, newRoot, "west", gatewaytest.Options{Issuer: "east"})
	_, _, err = CheckCertificates(forged.CertPEM, forged.KeyPEM, append(append([]byte{}, oldRoot.CertPEM...), newRoot.CertPEM...), "")
	require.ErrorContains(t, err, "certificate for west issued by east's intermediate")
}

package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// load loads the files f names.
func load(t *testing.T, f gatewaytest.Files) *Certs {
	t.Helper()
	c, err := LoadCerts(CertFiles{Cert: f.Cert, Key: f.Key, CA: f.CA})
	require.NoError(t, err)
	return c
}

// loadIssued issues cluster's files from a new root into a directory of
// the test's and loads them.
func loadIssued(t *testing.T, cluster string) (*gatewaytest.CA, gatewaytest.Files, *Certs) {
	t.Helper()
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	files, err := ca.IssueFiles(t.TempDir(), cluster, gatewaytest.Options{})
	require.NoError(t, err)
	c := load(t, files)
	assert.Equal(t, cluster, c.Cluster())
	return ca, files, c
}

// reloaded requires c to switch to the files it reads.
func reloaded(t *testing.T, c *Certs) {
	t.Helper()
	changed, err := c.Reload()
	require.NoError(t, err)
	require.True(t, changed)
}

// reloadRefused requires c to refuse the files it reads with an error
// that contains want, counted, and to keep its material.
func reloadRefused(t *testing.T, c *Certs, want string) {
	t.Helper()
	cluster, before := c.Cluster(), value(certReloads.WithLabelValues("error"))
	changed, err := c.Reload()
	require.ErrorContains(t, err, want)
	assert.False(t, changed)
	assert.Equal(t, before+1, value(certReloads.WithLabelValues("error")))
	assert.Equal(t, cluster, c.Cluster())
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

// reissue writes a new certificate of cluster into the pair's directory,
// from the pair's root, and returns it.
func (p *pair) reissue(t *testing.T, cluster string, o gatewaytest.Options) *x509.Certificate {
	t.Helper()
	is := issue(t, p.ca, cluster, o)
	_, err := p.ca.Write(p.dir, cluster, is)
	require.NoError(t, err)
	return parseCert(t, is.CertPEM)
}

// ingressSerial makes a new full handshake with the ingress (no session to
// resume) and returns the serial of the certificate it presents.
func (p *pair) ingressSerial(t *testing.T) *big.Int {
	t.Helper()
	c := dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil))
	defer c.Close()
	cs := c.ConnectionState()
	require.False(t, cs.DidResume)
	return cs.PeerCertificates[0].SerialNumber
}

// clientSerial makes a full handshake from certs (as the egress makes it)
// to a TLS server configured like the ingress, and returns the serial of
// the client certificate the server saw.
func clientSerial(t *testing.T, certs, server *Certs) *big.Int {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(b, server.ServerConfig())
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	cli := tls.Client(a, certs.ClientConfig(server.Cluster(), nil))
	_ = cli.SetDeadline(time.Now().Add(10 * time.Second))
	require.NoError(t, cli.Handshake())
	require.NoError(t, <-done)
	return srv.ConnectionState().PeerCertificates[0].SerialNumber
}

// Certificates replaced under streams that are moving bytes: every stream
// carries on and completes intact, and new handshakes present the new
// certificates, the ingress's and the egress's.
func TestCertRotationUnderLoad(t *testing.T) {
	p := newPair(t)
	port := p.serveWeb(t, startHashSink(t).addr)
	oldWest := p.ingressSerial(t)

	const streams = 8
	var written [streams]atomic.Int64
	stop := make(chan struct{})
	results := make(chan error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		c := dialEgress(t, port)
		wg.Go(func() {
			results <- func() error {
				h := sha256.New()
				src := prng(byte(100 + i))
				buf := make([]byte, 32<<10)
				var n int64
				for {
					select {
					case <-stop:
						if err := c.CloseWrite(); err != nil {
							return err
						}
						_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
						answer, err := io.ReadAll(c)
						if err != nil {
							return fmt.Errorf("stream %d: %w", i, err)
						}
						if want := fmt.Sprintf("%d %x", n, h.Sum(nil)); string(answer) != want {
							return fmt.Errorf("stream %d: target got %q, sent %s", i, answer, want)
						}
						return nil
					default:
					}
					_, _ = io.ReadFull(src, buf)
					if _, err := c.Write(buf); err != nil {
						return fmt.Errorf("stream %d after %d bytes: %w", i, n, err)
					}
					h.Write(buf)
					n += int64(len(buf))
					written[i].Store(n)
				}
			}()
		})
	}
	moving := func(from [streams]int64, by int64) func() bool {
		return func() bool {
			for i := range streams {
				if written[i].Load() < from[i]+by {
					return false
				}
			}
			return true
		}
	}
	var zero [streams]int64
	require.Eventually(t, moving(zero, 1<<20), 30*time.Second, 5*time.Millisecond, "streams never got going")

	reloads := value(certReloads.WithLabelValues("success"))
	newWest := p.reissue(t, "west", gatewaytest.Options{})
	newEast := p.reissue(t, "east", gatewaytest.Options{})
	reloaded(t, p.west)
	reloaded(t, p.east)
	assert.Equal(t, reloads+2, value(certReloads.WithLabelValues("success")))

	// The streams keep moving after the switch...
	var at [streams]int64
	for i := range streams {
		at[i] = written[i].Load()
	}
	require.Eventually(t, moving(at, 1<<20), 30*time.Second, 5*time.Millisecond, "streams stalled after the reload")
	// ...while new handshakes present the new certificates...
	require.NotEqual(t, oldWest, newWest.SerialNumber)
	assert.Equal(t, newWest.SerialNumber, p.ingressSerial(t), "the ingress presents its old certificate")
	assert.Equal(t, newEast.SerialNumber, clientSerial(t, p.east, p.west), "the egress presents its old certificate")
	// ...and a new stream through the pair works.
	echo := startEcho(t, "new\n")
	p.resolver.set(Destination{Namespace: "default", Service: "fresh", Port: 80}, echo.addr)
	roundTrip(t, p.mirror(t, "fresh", "", 80), "new\n")

	close(stop)
	wg.Wait()
	close(results)
	for err := range results {
		assert.NoError(t, err)
	}
}

// A set of files that does not load is refused and counted; the old
// material stays in use. Rewriting the same files changes nothing.
func TestCertReloadKeepsOldOnError(t *testing.T) {
	p := newPair(t)
	files := CertFiles{Cert: filepath.Join(p.dir, "west.crt"), Key: filepath.Join(p.dir, "west.key"), CA: filepath.Join(p.dir, "ca.crt")}
	old := p.ingressSerial(t)
	oldExpiry := value(certExpiry)
	other, err := gatewaytest.NewCA("another root")
	require.NoError(t, err)
	a := issue(t, p.ca, "west", gatewaytest.Options{})
	b := issue(t, p.ca, "west", gatewaytest.Options{})
	paris := issue(t, p.ca, "paris", gatewaytest.Options{})
	foreign := issue(t, other, "west", gatewaytest.Options{})

	for _, tc := range []struct {
		name  string
		write func()
		want  string
	}{
		{"key of another certificate", func() { writeFile(t, files.Cert, a.CertPEM); writeFile(t, files.Key, b.KeyPEM) }, "private key does not match"},
		{"another cluster", func() { writeFile(t, files.Cert, paris.CertPEM); writeFile(t, files.Key, paris.KeyPEM) }, "refusing to change identity"},
		{"another root", func() { writeFile(t, files.Cert, foreign.CertPEM); writeFile(t, files.Key, foreign.KeyPEM) }, "does not chain"},
		{"half-written certificate", func() {
			writeFile(t, files.Cert, a.CertPEM[:len(a.CertPEM)/2])
			writeFile(t, files.Key, a.KeyPEM)
		}, "west.crt"},
		{"key file gone", func() { require.NoError(t, os.Remove(files.Key)) }, "west.key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write()
			reloadRefused(t, p.west, tc.want)
			assert.Equal(t, old, p.ingressSerial(t), "the ingress stopped presenting its certificate")
			assert.Equal(t, oldExpiry, value(certExpiry))
		})
	}

	// A good set again: switched to, counted, its expiry published.
	notAfter := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	good := p.reissue(t, "west", gatewaytest.Options{NotAfter: notAfter})
	success := value(certReloads.WithLabelValues("success"))
	reloaded(t, p.west)
	assert.Equal(t, success+1, value(certReloads.WithLabelValues("success")))
	assert.Equal(t, good.SerialNumber, p.ingressSerial(t))
	assert.Equal(t, float64(notAfter.Unix()), value(certExpiry))
	// The same files once more: nothing to do, nothing counted.
	changed, err := p.west.Reload()
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, success+1, value(certReloads.WithLabelValues("success")))
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// Watch notices rewritten files by itself.
func TestCertWatch(t *testing.T) {
	p := newPair(t)
	ctx := t.Context()
	go p.west.Watch(ctx, 20*time.Millisecond)
	old := p.ingressSerial(t)
	rotated := p.reissue(t, "west", gatewaytest.Options{})
	require.NotEqual(t, old, rotated.SerialNumber)
	require.Eventually(t, func() bool { return p.ingressSerial(t).Cmp(rotated.SerialNumber) == 0 },
		10*time.Second, 20*time.Millisecond, "Watch never switched to the rewritten certificate")
}

// LoadCerts refuses a set that would not work, saying which file.
func TestLoadCertsErrors(t *testing.T) {
	ca, good, c := loadIssued(t, "east")
	assert.Equal(t, trust.DefaultTrustDomain, c.TrustDomain())
	dir := filepath.Dir(good.Cert)

	noID, err := ca.IssueFiles(t.TempDir(), "east", gatewaytest.Options{NoIdentity: true})
	require.NoError(t, err)
	notCA := filepath.Join(dir, "not-a-ca.pem")
	writeFile(t, notCA, []byte("not PEM"))
	for _, tc := range []struct {
		name  string
		files CertFiles
		want  string
	}{
		{"no key file", CertFiles{Cert: good.Cert, CA: good.CA}, "all required"},
		{"missing file", CertFiles{Cert: good.Cert, Key: good.Key, CA: filepath.Join(dir, "nope")}, "nope"},
		{"root without PEM", CertFiles{Cert: good.Cert, Key: good.Key, CA: notCA}, "no PEM certificate"},
		{"no identity", CertFiles{Cert: noID.Cert, Key: noID.Key, CA: noID.CA}, "0 spiffe URI SANs"},
		{"other trust domain", CertFiles{Cert: good.Cert, Key: good.Key, CA: good.CA, TrustDomain: "example.org"}, "not in trust domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCerts(tc.files)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A resumed TLS session skips certificate verification, so no session
// may outlive a change of material: after either side reloads, the next
// handshake is a full one.
func TestReloadEndsSessionResumption(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			p := newPair(t)
			probe := func() bool {
				t.Helper()
				c := dialTLS(t, p.ingressAddr, p.east.PeerConfig("west"))
				_, err := io.WriteString(c, "GET "+ProbePath+" HTTP/1.1\r\nHost: west\r\n\r\n")
				require.NoError(t, err)
				// Reading the answer also takes in the session ticket.
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				return c.ConnectionState().DidResume
			}
			assert.False(t, probe(), "first handshake is full")
			require.True(t, probe(), "second one resumes")

			cluster, certs := "east", p.east
			if side == "server" {
				cluster, certs = "west", p.west
			}
			_, err := p.ca.IssueFiles(p.dir, cluster, gatewaytest.Options{})
			require.NoError(t, err)
			reloaded(t, certs)
			assert.False(t, probe(), "after the %s's reload the handshake is full", side)
			assert.True(t, probe(), "and resumes again afterwards")
		})
	}
}

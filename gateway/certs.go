package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/trust"

	"k8s.io/klog/v2"
)

// CertFiles names the files of a gateway's TLS material: its certificate
// chain (the certificate, then its cluster's intermediate) and key, and the
// trust root shared by every cluster (old and new during a rotation of the
// root). They are read again when they change, so that a rotated
// certificate (a Secret volume updated by cert-manager, say) is used for
// new handshakes without a restart, while established connections carry
// on.
type CertFiles struct {
	Cert, Key, CA string
	// TrustDomain is the trust domain of identities
	// (trust.DefaultTrustDomain when empty).
	TrustDomain string
}

// material is one consistent set of certificate, key and root.
type material struct {
	cert    tls.Certificate
	roots   *x509.CertPool
	cluster string // the cluster the certificate names
	// expiry is the earliest NotAfter of the certificate and of the
	// intermediate that issued it: a certificate valid for longer than
	// its intermediate is not.
	expiry time.Time
	raw    []byte // the three files, to tell a change
}

// Certs holds the current TLS material and builds TLS configurations that
// always use it.
type Certs struct {
	files CertFiles
	cur   atomic.Pointer[material]

	mu sync.Mutex
	// servers are the server configurations handed out: their session
	// ticket keys are replaced when the material changes, so that no
	// session verified under the old root is resumed.
	servers []*tls.Config
	// clients are the client configurations of each peer for the current
	// material, each with its own session cache; dropped when it changes.
	clients map[string]*tls.Config
}

// LoadCerts reads the files once; the error says which file is wrong.
func LoadCerts(files CertFiles) (*Certs, error) {
	files.TrustDomain = cmp.Or(files.TrustDomain, trust.DefaultTrustDomain)
	c := &Certs{files: files}
	m, err := c.read()
	if err != nil {
		return nil, err
	}
	c.set(m)
	return c, nil
}

// Cluster returns the cluster the gateway's own certificate names.
func (c *Certs) Cluster() string { return c.cur.Load().cluster }

// TrustDomain returns the trust domain of identities.
func (c *Certs) TrustDomain() string { return c.files.TrustDomain }

// Identity returns the SPIFFE ID the gateway's own certificate carries.
func (c *Certs) Identity() *url.URL { return trust.Identity(c.TrustDomain(), c.Cluster()) }

func (c *Certs) set(m *material) {
	c.cur.Store(m)
	certExpiry.Set(float64(m.expiry.Unix()))
	// Sessions were verified against the old material: a resumed session
	// skips verification, so none may outlive a rotation of the root.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clients = map[string]*tls.Config{}
	for _, cfg := range c.servers {
		var key [32]byte
		if _, err := rand.Read(key[:]); err == nil {
			cfg.SetSessionTicketKeys([][32]byte{key})
		}
	}
}

func (c *Certs) read() (*material, error) {
	var raw [][]byte
	for _, f := range []string{c.files.Cert, c.files.Key, c.files.CA} {
		if f == "" {
			return nil, errors.New("certificate, key and trust root files are all required")
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		raw = append(raw, b)
	}
	m, err := parseMaterial(raw[0], raw[1], raw[2], c.files)
	if err != nil {
		return nil, err
	}
	m.raw = bytes.Join(raw, nil)
	return m, nil
}

// CheckCertificates puts a certificate chain, its key and a trust root
// bundle (PEM) through the checks a gateway's own files pass at start-up
// and at every reload, and returns the cluster the certificate names and
// when the chain expires (its certificate's or its intermediate's
// NotAfter, whichever comes first): what coredns-mc certs checks before it
// writes a set.
func CheckCertificates(certPEM, keyPEM, caPEM []byte, trustDomain string) (cluster string, expiry time.Time, err error) {
	m, err := parseMaterial(certPEM, keyPEM, caPEM, CertFiles{Cert: "certificate", Key: "key", CA: "trust root",
		TrustDomain: cmp.Or(trustDomain, trust.DefaultTrustDomain)})
	if err != nil {
		return "", time.Time{}, err
	}
	return m.cluster, m.expiry, nil
}

// parseMaterial checks the contents of files; errors name them.
func parseMaterial(certPEM, keyPEM, caPEM []byte, files CertFiles) (*material, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", files.Cert, files.Key, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate", files.CA)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", files.Cert, err)
		}
	}
	// The gateway's own certificate must pass the checks it puts peers
	// through: a mistake shows at start-up, not at the first connection.
	inter := intermediates(cert)
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		hint := ""
		if len(cert.Certificate) == 1 {
			hint = " (it holds the certificate alone: its cluster's intermediate must follow it)"
		}
		return nil, fmt.Errorf("%s does not chain to %s%s: %w", files.Cert, files.CA, hint, err)
	}
	if err := checkUsages(leaf, roots, inter); err != nil {
		return nil, fmt.Errorf("%s: %w", files.Cert, err)
	}
	cluster, err := trust.ClusterOf(leaf, files.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.Cert, err)
	}
	chain, err := trust.AcceptedChain(chains, cluster, files.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.Cert, err)
	}
	return &material{cert: cert, roots: roots, cluster: cluster, expiry: trust.ChainExpiry(chain)}, nil
}

// checkUsages verifies that the gateway's own certificate, which chains to
// roots, is valid for both server authentication (the ingress presents it)
// and client authentication (the egress and the prober do), as its peers
// will check. x509 takes a chain that allows any one of the usages asked
// for, so each is asked for alone: a certificate for client authentication
// only would pass a single check, and every peer's ingress would then
// refuse it.
func checkUsages(leaf *x509.Certificate, roots, inter *x509.CertPool) error {
	for _, u := range []struct {
		usage      x509.ExtKeyUsage
		name, role string
	}{
		{x509.ExtKeyUsageServerAuth, "server authentication (extended key usage serverAuth)", "the ingress presents it to peers"},
		{x509.ExtKeyUsageClientAuth, "client authentication (extended key usage clientAuth)", "the egress and the probes present it to peers' ingress"},
	} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{u.usage}}); err != nil {
			return fmt.Errorf("not valid for %s, which it needs: %s (%w)", u.name, u.role, err)
		}
	}
	return nil
}

func intermediates(cert tls.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}

// Reload reads the files again and switches to them when they changed and
// are usable. A bad set (a key that does not match, a file half-written) is
// reported and the old material stays in use. The cluster may not change.
func (c *Certs) Reload() (changed bool, err error) {
	m, err := c.read()
	if err == nil && m.cluster != c.Cluster() {
		err = fmt.Errorf("%s names cluster %q, not %q: refusing to change identity", c.files.Cert, m.cluster, c.Cluster())
	}
	if err != nil {
		certReloads.WithLabelValues("error").Inc()
		return false, err
	}
	if bytes.Equal(m.raw, c.cur.Load().raw) {
		return false, nil
	}
	c.set(m)
	certReloads.WithLabelValues("success").Inc()
	return true, nil
}

// Watch reloads the files every interval until ctx ends. Polling, rather
// than file notifications, follows a Secret volume's symlink swap and a
// plain rewrite alike.
func (c *Certs) Watch(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.Reload()
		if err != nil {
			logger.Error(err, "Certificates not reloaded; the previous ones stay in use")
			continue
		}
		if changed {
			logger.Info("Reloaded certificates", "cluster", c.Cluster(), "notAfter", c.cur.Load().expiry)
		}
	}
}

// verify checks a peer's chain against the current root, and that the
// intermediate of the cluster it names issued it (trust.VerifyPeer), and
// returns that cluster.
func (c *Certs) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	return trust.VerifyPeer(certs, c.cur.Load().roots, c.files.TrustDomain, time.Time{}, usage)
}

// ServerConfig is the ingress's TLS configuration: TLS 1.3 only, a client
// certificate that chains to the current root through its own cluster's
// intermediate required (one issued otherwise is counted as
// issuer_mismatch). The verified peer cluster is read back with
// PeerCluster.
func (c *Certs) ServerConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert, // verified below, against the current root
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &c.cur.Load().cert, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs, err := x509.ParseCertificates(bytes.Join(raw, nil))
			if err != nil {
				return err
			}
			_, err = c.verify(certs, x509.ExtKeyUsageClientAuth)
			var ie *trust.IssuerError
			if errors.As(err, &ie) {
				// Labelled with the cluster whose credentials made
				// it, which the root vouches for; not with the
				// cluster it claims, which they could make up.
				refusalsTotal.WithLabelValues(ie.Issuer, DirectionIngress, string(ReasonIssuerMismatch)).Inc()
				klog.Background().V(1).Info("Refused", "peer", ie.Issuer, "claimed", ie.Cluster, "reason", ReasonIssuerMismatch, "err", err)
			}
			return err
		},
		NextProtos: []string{"http/1.1"},
	}
	c.mu.Lock()
	c.servers = append(c.servers, cfg)
	c.mu.Unlock()
	return cfg
}

// PeerConfig returns the client configuration towards peer's ingress, made
// once per peer and material (see ClientConfig), with a session cache of
// its own: a resumed session is one verified as that peer's under the
// current root.
func (c *Certs) PeerConfig(peer string) *tls.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cfg, ok := c.clients[peer]; ok {
		return cfg
	}
	cfg := c.ClientConfig(peer, tls.NewLRUClientSessionCache(64))
	c.clients[peer] = cfg
	return cfg
}

// ClientConfig is the egress's (and the prober's) TLS configuration towards
// the ingress of cluster peer: TLS 1.3 only, the server's chain verified
// against the current root through peer's intermediate, and its identity
// required to be peer's. The address it is reached at plays no part:
// gateways are known by identity, not by name. Sessions are resumed from
// cache, which saves the certificate exchange on every connection after the
// first.
func (c *Certs) ClientConfig(peer string, sessions tls.ClientSessionCache) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyConnection
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &c.cur.Load().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				return nil // verified when the session was made
			}
			got, err := c.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if got != peer {
				return fmt.Errorf("reached the gateway of cluster %q, not %q", got, peer)
			}
			return nil
		},
		ClientSessionCache: sessions,
		NextProtos:         []string{"http/1.1"},
	}
}

// PeerCluster returns the cluster named by the verified client certificate
// of a completed server handshake.
func (c *Certs) PeerCluster(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("no client certificate")
	}
	return trust.ClusterOf(cs.PeerCertificates[0], c.files.TrustDomain)
}

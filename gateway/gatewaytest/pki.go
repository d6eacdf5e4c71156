// Package gatewaytest issues gateway certificates for tests, benchmarks and
// the demo, the way deploy/certificates.md has a fleet do it (and with the
// same code, internal/trust): a trust root, one intermediate CA per cluster
// that names it, and every cluster's certificate issued by its own
// cluster's intermediate, the certificate file holding the chain (the
// certificate, then the intermediate). Options make what the gateway
// refuses: a certificate issued by another cluster's intermediate (the
// forgery a cluster's credentials must not be able to make) or by the root
// itself.
package gatewaytest

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/trust"
)

// CA is a trust root, or a cluster's intermediate made by one.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte

	// root is the root that signed an intermediate; nil for a root.
	root *CA
	mu   sync.Mutex
	// intermediates are the root's intermediates that Issue uses, made
	// at the first certificate of each cluster and trust domain.
	intermediates map[[2]string]*CA
}

// NewCA makes a self-signed root, valid for a year from an hour ago.
func NewCA(name string) (*CA, error) {
	key, err := trust.NewKey()
	if err != nil {
		return nil, err
	}
	tmpl := trust.RootTemplate(trust.DefaultTrustDomain, time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour))
	tmpl.Subject.CommonName = name
	cert, err := trust.SelfSign(tmpl, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: trust.CertPEM(cert)}, nil
}

// Options shape an issued certificate, or an intermediate.
type Options struct {
	// TrustDomain defaults to mcmirror.dev, the gateway's default.
	TrustDomain string
	// NotBefore and NotAfter default to an hour ago and a day from now
	// (90 days for an intermediate).
	NotBefore, NotAfter time.Time
	// NoIdentity leaves the spiffe URI SAN out.
	NoIdentity bool
	// Issuer is the cluster whose intermediate issues the certificate:
	// the certificate's own when empty. Another cluster's makes the
	// forgery that every gateway refuses.
	Issuer string
	// FromRoot issues the certificate with the root itself, without an
	// intermediate: refused too.
	FromRoot bool
}

func (o Options) withDefaults(valid time.Duration) Options {
	o.TrustDomain = cmp.Or(o.TrustDomain, trust.DefaultTrustDomain)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(valid)
	}
	return o
}

// Intermediate makes a new intermediate of cluster, signed by the root ca,
// valid for 90 days unless o says otherwise (Issuer and FromRoot play no
// part). Issue uses one of its own; this one is for tests that want
// another (one that expires sooner, say).
func (ca *CA) Intermediate(cluster string, o Options) (*CA, error) {
	if ca.root != nil {
		return nil, errors.New("gatewaytest: an intermediate is made by the root")
	}
	o = o.withDefaults(90 * 24 * time.Hour)
	cert, key, err := sign(trust.IntermediateTemplate(o.TrustDomain, cluster, o.NotBefore, o.NotAfter), ca, o)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: trust.CertPEM(cert), root: ca}, nil
}

// intermediate returns the root's intermediate of cluster in trustDomain
// that Issue uses, made once.
func (ca *CA) intermediate(trustDomain, cluster string) (*CA, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	k := [2]string{trustDomain, cluster}
	if in, ok := ca.intermediates[k]; ok {
		return in, nil
	}
	in, err := ca.Intermediate(cluster, Options{TrustDomain: trustDomain})
	if err != nil {
		return nil, err
	}
	if ca.intermediates == nil {
		ca.intermediates = map[[2]string]*CA{}
	}
	ca.intermediates[k] = in
	return in, nil
}

// Issued is a certificate chain and its key, PEM-encoded.
type Issued struct {
	// CertPEM is the certificate, followed by the intermediate that
	// issued it (nothing follows one issued by the root).
	CertPEM, KeyPEM []byte
}

// Issue makes the gateway certificate of cluster, for both server and
// client use. From a root it is issued by the root's intermediate of
// cluster (of o.Issuer when set; by the root itself with o.FromRoot);
// from an intermediate, by that intermediate.
func (ca *CA) Issue(cluster string, o Options) (*Issued, error) {
	o = o.withDefaults(24 * time.Hour)
	signer := ca
	switch {
	case ca.root != nil:
		if o.Issuer != "" || o.FromRoot {
			return nil, errors.New("gatewaytest: Issuer and FromRoot are options of a root's Issue")
		}
	case !o.FromRoot:
		var err error
		if signer, err = ca.intermediate(o.TrustDomain, cmp.Or(o.Issuer, cluster)); err != nil {
			return nil, err
		}
	}
	cert, key, err := sign(trust.GatewayTemplate(o.TrustDomain, cluster, o.NotBefore, o.NotAfter), signer, o)
	if err != nil {
		return nil, err
	}
	keyPEM, err := trust.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	chain := trust.CertPEM(cert)
	if signer.root != nil {
		chain = append(chain, signer.CertPEM...)
	}
	return &Issued{CertPEM: chain, KeyPEM: keyPEM}, nil
}

// sign makes a key and signs tmpl for it with signer, without the spiffe
// URI SAN when o says so.
func sign(tmpl *x509.Certificate, signer *CA, o Options) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := trust.NewKey()
	if err != nil {
		return nil, nil, err
	}
	if o.NoIdentity {
		tmpl.URIs = nil
	}
	cert, err := trust.Sign(tmpl, key.Public(), &trust.CA{Cert: signer.Cert, Key: signer.Key})
	return cert, key, err
}

// Files are the paths of a gateway's certificate, key and trust root.
type Files struct {
	Cert, Key, CA string
}

// Args returns them as coredns-mc gateway flags.
func (f Files) Args() []string {
	return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
}

// Write writes the certificate chain, its key and the root into dir as
// <cluster>.crt, <cluster>.key and ca.crt, each by rename so that a reader
// never sees half a file.
func (ca *CA) Write(dir, cluster string, is *Issued) (Files, error) {
	f := Files{Cert: filepath.Join(dir, cluster+".crt"), Key: filepath.Join(dir, cluster+".key"), CA: filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{f.Cert: is.CertPEM, f.Key: is.KeyPEM, f.CA: cmp.Or(ca.root, ca).CertPEM} {
		if err := writeAtomic(path, data); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// IssueFiles issues cluster's certificate and writes it into dir.
func (ca *CA) IssueFiles(dir, cluster string, o Options) (Files, error) {
	is, err := ca.Issue(cluster, o)
	if err != nil {
		return Files{}, err
	}
	return ca.Write(dir, cluster, is)
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

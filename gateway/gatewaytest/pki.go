// Package gatewaytest issues gateway certificates for tests, benchmarks and
// the demo: a trust root, and one certificate per cluster with the identity
// the gateway wants (spiffe://<trust domain>/cluster/<name>).
package gatewaytest

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
	"time"
)

// CA is a trust root.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a self-signed root valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// Options shape an issued certificate.
type Options struct {
	// TrustDomain defaults to mcmirror.dev, the gateway's default.
	TrustDomain string
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// NoIdentity leaves the spiffe URI SAN out.
	NoIdentity bool
}

// Issued is a certificate and its key, PEM-encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// Issue makes the gateway certificate of cluster, for both server and client
// use.
func (ca *CA) Issue(cluster string, o Options) (*Issued, error) {
	if o.TrustDomain == "" {
		o.TrustDomain = "mcmirror.dev"
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "gateway." + cluster},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if !o.NoIdentity {
		// The package does not import gateway (whose tests use it), so
		// the identity's form is written out: gateway.Identity.
		tmpl.URIs = append(tmpl.URIs, &url.URL{Scheme: "spiffe", Host: o.TrustDomain, Path: "/cluster/" + cluster})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", kder)}, nil
}

// Files are the paths of a gateway's certificate, key and trust root.
type Files struct {
	Cert, Key, CA string
}

// Args returns them as coredns-mc gateway flags.
func (f Files) Args() []string {
	return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
}

// Write writes the certificate, its key and the root into dir as
// <cluster>.crt, <cluster>.key and ca.crt, each by rename so that a reader
// never sees half a file.
func (ca *CA) Write(dir, cluster string, is *Issued) (Files, error) {
	f := Files{Cert: filepath.Join(dir, cluster+".crt"), Key: filepath.Join(dir, cluster+".key"), CA: filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{f.Cert: is.CertPEM, f.Key: is.KeyPEM, f.CA: ca.CertPEM} {
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

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

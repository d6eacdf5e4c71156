package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"time"
)

// pki is the environment's certificate authority. Every API server serves a
// certificate it signed, so one CA bundle in a kubeconfig is enough and the
// kubeconfig is self-contained (it can be stored in a Secret as is).
type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	// CAPEM is the CA certificate, PEM encoded.
	CAPEM []byte
}

func newPKI() (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mcmirror-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pki{caCert: cert, caKey: key, CAPEM: pemBlock("CERTIFICATE", der)}, nil
}

// serving writes a serving certificate for the loopback addresses, the
// in-cluster API names and the addresses hosts to certPath and keyPath.
func (p *pki) serving(certPath, keyPath string, hosts ...netip.Addr) error {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if !h.IsLoopback() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, h.AsSlice())
		}
	}
	return p.issue(certPath, keyPath, tmpl)
}

// client writes a client certificate for user cn in group org to certPath
// and keyPath.
func (p *pki) client(certPath, keyPath, cn, org string) error {
	return p.issue(certPath, keyPath, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{org}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// issue signs tmpl, given a new key, a random serial and ten days of
// validity, and writes the certificate to certPath and its key to keyPath.
func (p *pki) issue(certPath, keyPath string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(10*24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

// writeServiceAccountKey writes the key pair that signs ServiceAccount tokens.
func writeServiceAccountKey(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(pubPath, pemBlock("PUBLIC KEY", pub), 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pemBlock("EC PRIVATE KEY", der), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

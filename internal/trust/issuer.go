package trust

// The certificates of the trust model (deploy/certificates.md): a trust
// root, whose key stays off every cluster; one intermediate CA per
// cluster, signed by the root and naming that cluster; and each cluster's
// gateway certificate, issued by its own cluster's intermediate. A
// cluster's credentials, its intermediate's key, then issue only its own
// identity, because the gateway accepts a certificate only through the
// intermediate of the cluster it names (chain.go).
//
// `coredns-mc certs` makes real certificates here, and
// gateway/gatewaytest those of the tests, so that both are made alike.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// Backdate is how long before it is made a certificate becomes valid: room
// for a peer whose clock is behind.
const Backdate = 5 * time.Minute

// RootTemplate is the template of a trust root: a CA with a path length of
// one, so that nothing it signs can sign a CA in turn; the certificates it
// signs are the clusters' intermediates.
func RootTemplate(trustDomain string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: Serial(),
		// The date tells two roots apart during a rotation.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("mcmirror root %s %s", trustDomain, notBefore.Add(Backdate).UTC().Format("2006-01-02"))},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
		URIs:                  []*url.URL{TrustDomainID(trustDomain)},
	}
}

// IntermediateTemplate is the template of cluster's intermediate: a CA that
// names the cluster and signs only end certificates (path length zero).
func IntermediateTemplate(trustDomain, cluster string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          Serial(),
		Subject:               pkix.Name{CommonName: "mcmirror intermediate " + cluster},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{Identity(trustDomain, cluster)},
	}
}

// GatewayTemplate is the template of cluster's gateway certificate, used as
// server (the ingress) and as client (the egress and the probes).
func GatewayTemplate(trustDomain, cluster string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: Serial(),
		Subject:      pkix.Name{CommonName: "gateway." + cluster},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{Identity(trustDomain, cluster)},
	}
}

// CA is a certificate that issues others, with its key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewKey makes an ECDSA P-256 key, the kind of every key here.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// Sign makes the certificate of tmpl for pub, signed by parent.
func Sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *CA) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.Cert, pub, parent.Key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// SelfSign makes the self-signed certificate of tmpl with key: a root.
func SelfSign(tmpl *x509.Certificate, key crypto.Signer) (*x509.Certificate, error) {
	return Sign(tmpl, key.Public(), &CA{Cert: tmpl, Key: key})
}

// NewRoot makes a trust root of trustDomain with a new key.
func NewRoot(trustDomain string, notBefore, notAfter time.Time) (*CA, error) {
	return issue(RootTemplate(trustDomain, notBefore, notAfter), nil)
}

// NewIntermediate makes cluster's intermediate, with a new key, signed by
// root.
func (root *CA) NewIntermediate(trustDomain, cluster string, notBefore, notAfter time.Time) (*CA, error) {
	return issue(IntermediateTemplate(trustDomain, cluster, notBefore, notAfter), root)
}

// NewGateway makes cluster's gateway certificate, with a new key, issued
// by ca, which is to be cluster's intermediate.
func (ca *CA) NewGateway(trustDomain, cluster string, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	gw, err := issue(GatewayTemplate(trustDomain, cluster, notBefore, notAfter), ca)
	if err != nil {
		return nil, nil, err
	}
	return gw.Cert, gw.Key.(*ecdsa.PrivateKey), nil
}

// issue makes the certificate of tmpl with a new key, signed by parent
// (nil: self-signed), and returns it with its key.
func issue(tmpl *x509.Certificate, parent *CA) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	if parent == nil {
		parent = &CA{Cert: tmpl, Key: key}
	}
	cert, err := Sign(tmpl, key.Public(), parent)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM encodes certs, in order, as PEM: a chain, the certificate first.
func CertPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// KeyPEM encodes a key as PEM: an ECDSA key as SEC 1 ("EC PRIVATE KEY", as
// openssl ecparam writes it), any other as PKCS #8.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	if k, ok := key.(*ecdsa.PrivateKey); ok {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCertificates decodes every PEM certificate of data, in order.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// ParseCA reads a CA from its certificate (the first of certPEM) and its
// key, and returns it with the certificates that follow it in certPEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, []*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	certs := make([]*x509.Certificate, len(pair.Certificate))
	for i, der := range pair.Certificate {
		if certs[i], err = x509.ParseCertificate(der); err != nil {
			return nil, nil, err
		}
	}
	if !certs[0].IsCA || certs[0].KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("certificate %q is not a CA (basic constraints CA:TRUE and key usage keyCertSign)", certs[0].Subject.CommonName)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key of %q cannot sign", certs[0].Subject.CommonName)
	}
	return &CA{Cert: certs[0], Key: key}, certs[1:], nil
}

// Serial returns a random serial number of 128 bits.
func Serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1)) // never zero
}

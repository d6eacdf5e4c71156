package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/trust"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// `coredns-mc certs` makes the gateways' certificates on a workstation,
// offline (deploy/certificates.md): the root once, whose key never goes
// into a cluster; each cluster's intermediate CA, whose key goes into that
// cluster only; and each cluster's gateway certificate, from its own
// intermediate.

func init() {
	subcommands["certs"] = func(args []string) int { return runCerts(args, os.Stdout, os.Stderr, time.Now) }
}

// The files each step writes into its --out directory.
const (
	rootCertFile = "root.crt"
	rootKeyFile  = "root.key"
	tlsCertFile  = "tls.crt" // cluster: the intermediate; gateway: the certificate, then the intermediate
	tlsKeyFile   = "tls.key"
	caCertFile   = "ca.crt" // the root (gateway: or the roots of --ca-bundle)
)

const certsUsage = `usage: coredns-mc certs root|cluster|gateway [flags]

Makes the gateways' certificates, offline, in files (deploy/certificates.md):
  root     the trust root, once for the fleet; its key stays off every cluster
  cluster  a cluster's intermediate CA, signed by the root and naming the cluster,
           for the cluster (as a cert-manager CA Issuer's Secret, say)
  gateway  a cluster's gateway certificate, issued by that cluster's intermediate

'coredns-mc certs STEP -h' lists the step's flags.`

var certsStepUsage = map[string]string{
	"root": "usage: coredns-mc certs root --out DIR [--trust-domain mcmirror.dev] [--valid 87600h]\n\n" +
		"Writes the trust root of every cluster's gateway: DIR/root.crt and DIR/root.key (0600). Keep the\n" +
		"key offline: it signs the clusters' intermediates, nothing else. Existing files are never replaced.\n\nFlags:",
	"cluster": "usage: coredns-mc certs cluster --root DIR --cluster NAME --out DIR [--secret-name NAME] [flags]\n\n" +
		"Writes cluster NAME's intermediate CA, signed by the root in --root: DIR/tls.crt, DIR/tls.key (0600) and\n" +
		"DIR/ca.crt (the root). With --secret-name, also the Kubernetes Secret of these (type kubernetes.io/tls),\n" +
		"for a cert-manager CA Issuer in that cluster, on stdout or in --secret-file.\n\nFlags:",
	"gateway": "usage: coredns-mc certs gateway --issuer DIR --cluster NAME --out DIR [--secret] [flags]\n\n" +
		"Writes cluster NAME's gateway certificate, issued by the intermediate in --issuer (what 'certs cluster'\n" +
		"wrote for NAME): DIR/tls.crt (the certificate, then the intermediate), DIR/tls.key (0600) and DIR/ca.crt\n" +
		"(the root). With --secret (or --secret-name, --namespace), also the Secret that deploy/gateway.yaml mounts,\n" +
		"mcmirror/mcmirror-gateway-tls, on stdout or in --secret-file.\n\nFlags:",
}

// certsCmd is one run of a step of `coredns-mc certs`.
type certsCmd struct {
	cli
	step string
	now  time.Time
}

func runCerts(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "coredns-mc certs: want a step, root, cluster or gateway (-h for help)")
		return 2
	}
	c := &certsCmd{cli: cli{name: "certs " + args[0], stdout: stdout, stderr: stderr}, step: args[0], now: now()}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, certsUsage)
		return 0
	case "root":
		return c.root(args[1:])
	case "cluster":
		return c.cluster(args[1:])
	case "gateway":
		return c.gateway(args[1:])
	}
	fmt.Fprintf(stderr, "coredns-mc certs: unknown step %q: want root, cluster or gateway (-h for help)\n", args[0])
	return 2
}

// parse parses args with fl; ok false means exit with code. required are
// the flags that must be given.
func (c *certsCmd) parse(fl *flag.FlagSet, args []string, required ...string) (code int, ok bool) {
	if _, code, ok := c.parseFlags(fl, args, certsStepUsage[c.step], false); !ok {
		return code, false
	}
	for _, name := range required {
		if fl.Lookup(name).Value.String() == "" {
			return c.usage("--%s is required", name), false
		}
	}
	if cl := fl.Lookup("cluster"); cl != nil {
		if err := labels.ValidateClusterName(cl.Value.String()); err != nil {
			return c.usage("--cluster: %v", err), false
		}
	}
	if fl.Lookup("valid").Value.(flag.Getter).Get().(time.Duration) <= 0 {
		return c.usage("--valid must be positive"), false
	}
	return 0, true
}

func (c *certsCmd) root(args []string) int {
	fl := flag.NewFlagSet("coredns-mc certs root", flag.ContinueOnError)
	out := fl.String("out", "", "directory to write root.crt and root.key into; made if missing (required)")
	trustDomain := fl.String("trust-domain", trust.DefaultTrustDomain, "trust domain of the gateways' identities: the gateways' --trust-domain")
	valid := fl.Duration("valid", 87600*time.Hour, "how long the root is valid: ten years")
	if code, ok := c.parse(fl, args, "out"); !ok {
		return code
	}
	if err := validTrustDomain(*trustDomain); err != nil {
		return c.usage("--trust-domain: %v", err)
	}
	files, root, err := makeRoot(*trustDomain, c.now, *valid)
	if err != nil {
		return c.fail(err)
	}
	if err := writeFiles(*out, files, false, "a root is never replaced (its key signed every intermediate); write a new one elsewhere, another --out"); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stderr, "coredns-mc certs root: wrote %s and %s: root %q of trust domain %s, valid until %s. Keep %s off every cluster.\n",
		filepath.Join(*out, rootCertFile), filepath.Join(*out, rootKeyFile), root.Subject.CommonName, *trustDomain,
		root.NotAfter.UTC().Format(time.RFC3339), rootKeyFile)
	return 0
}

func (c *certsCmd) cluster(args []string) int {
	fl := flag.NewFlagSet("coredns-mc certs cluster", flag.ContinueOnError)
	rootDir := fl.String("root", "", "directory of root.crt and root.key ('certs root' --out) (required)")
	cluster := fl.String("cluster", "", "the cluster the intermediate is for: its --cluster name (required)")
	out := fl.String("out", "", "directory to write tls.crt, tls.key and ca.crt into; made if missing (required)")
	valid := fl.Duration("valid", 8760*time.Hour, "how long the intermediate is valid: a year, never beyond the root")
	trustDomain := fl.String("trust-domain", "", "trust domain, for a root that names none (one made by openssl); default: the root's, or "+trust.DefaultTrustDomain)
	secretName := fl.String("secret-name", "", "also write a Secret of this name with tls.crt, tls.key and ca.crt (type kubernetes.io/tls): a cert-manager CA Issuer's Secret")
	namespace := fl.String("namespace", "mcmirror", "namespace of the Secret")
	secretFile := fl.String("secret-file", "", "file to write the Secret into (0600) instead of stdout")
	force := fl.Bool("force", false, "replace files that exist in --out (a new intermediate for the cluster)")
	if code, ok := c.parse(fl, args, "root", "cluster", "out"); !ok {
		return code
	}
	if *secretName == "" && (*secretFile != "" || given(fl, "namespace")) {
		return c.usage("--secret-file and --namespace are the Secret's: give --secret-name too")
	}
	if *secretName != "" {
		if err := validSecret(*namespace, *secretName); err != nil {
			return c.usage("%v", err)
		}
	}
	root, err := loadRoot(*rootDir)
	if err != nil {
		return c.fail(err)
	}
	td, err := rootTrustDomain(root.Cert, *trustDomain)
	if err != nil {
		return c.usage("%v", err)
	}
	if !root.Cert.NotAfter.After(c.now) {
		return c.fail(fmt.Errorf("the root expired at %s: make a new one and rotate (deploy/certificates.md)", root.Cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	notAfter, cut := validUntil(c.now, *valid, root.Cert)
	if cut {
		fmt.Fprintf(c.stderr, "coredns-mc certs cluster: the root expires at %s, within --valid: so does the intermediate (rotate the root: deploy/certificates.md)\n",
			root.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	files, inter, err := makeIntermediate(root, td, *cluster, c.now, notAfter)
	if err != nil {
		return c.fail(err)
	}
	if err := c.writeOut(*out, files, *force, *secretName != "", *secretFile, *namespace, *secretName); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stderr, "coredns-mc certs cluster: wrote %s: the intermediate of %s (%s), valid until %s. Its key may go into %s, and into no other cluster.\n",
		filepath.Join(*out, "{"+tlsCertFile+","+tlsKeyFile+","+caCertFile+"}"), *cluster, trust.Identity(td, *cluster),
		inter.NotAfter.UTC().Format(time.RFC3339), *cluster)
	return 0
}

func (c *certsCmd) gateway(args []string) int {
	fl := flag.NewFlagSet("coredns-mc certs gateway", flag.ContinueOnError)
	issuerDir := fl.String("issuer", "", "directory of the cluster's intermediate: tls.crt, tls.key and ca.crt ('certs cluster' --out) (required)")
	cluster := fl.String("cluster", "", "the gateway's cluster, its --cluster name: the one the intermediate names (required)")
	out := fl.String("out", "", "directory to write tls.crt, tls.key and ca.crt into; made if missing (required)")
	valid := fl.Duration("valid", 2160*time.Hour, "how long the certificate is valid: 90 days, never beyond the intermediate")
	bundle := fl.String("ca-bundle", "", "file of the roots to write as ca.crt instead of the issuer's ca.crt: old and new root during a rotation of the root")
	secret := fl.Bool("secret", false, "also write the Secret deploy/gateway.yaml mounts, with tls.crt, tls.key and ca.crt (implied by --secret-name, --namespace and --secret-file)")
	secretName := fl.String("secret-name", "mcmirror-gateway-tls", "name of the Secret")
	namespace := fl.String("namespace", "mcmirror", "namespace of the Secret")
	secretFile := fl.String("secret-file", "", "file to write the Secret into (0600) instead of stdout")
	force := fl.Bool("force", false, "replace files that exist in --out (renewing the certificate)")
	if code, ok := c.parse(fl, args, "issuer", "cluster", "out"); !ok {
		return code
	}
	*secret = *secret || given(fl, "secret-name") || given(fl, "namespace") || *secretFile != ""
	if *secret {
		if err := validSecret(*namespace, *secretName); err != nil {
			return c.usage("%v", err)
		}
	}
	in, err := loadIssuer(*issuerDir)
	if err != nil {
		return c.fail(err)
	}
	if in.cluster != *cluster {
		return c.usage("--cluster %s, but %s holds %s's intermediate: a cluster's gateway certificate is issued by its own cluster's intermediate, "+
			"and every gateway refuses one issued by another's (give the --issuer that 'certs cluster --cluster %s' wrote)",
			*cluster, *issuerDir, in.cluster, *cluster)
	}
	roots := in.rootsPEM
	if *bundle != "" {
		if roots, err = os.ReadFile(*bundle); err != nil {
			return c.fail(fmt.Errorf("--ca-bundle: %w", err))
		}
	}
	notAfter, cut := validUntil(c.now, *valid, in.ca.Cert)
	if cut {
		fmt.Fprintf(c.stderr, "coredns-mc certs gateway: %s's intermediate expires at %s, within --valid: so does the certificate (make a new intermediate: deploy/certificates.md)\n",
			*cluster, in.ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	files, expiry, err := makeGateway(in, c.now, notAfter, roots)
	if err != nil {
		if *bundle != "" {
			err = fmt.Errorf("with --ca-bundle %s: %w", *bundle, err)
		}
		return c.fail(err)
	}
	if err := c.writeOut(*out, files, *force, *secret, *secretFile, *namespace, *secretName); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stderr, "coredns-mc certs gateway: wrote %s: the gateway certificate of %s (%s), valid until %s.\n",
		filepath.Join(*out, "{"+tlsCertFile+","+tlsKeyFile+","+caCertFile+"}"), *cluster, trust.Identity(in.trustDomain, *cluster),
		expiry.UTC().Format(time.RFC3339))
	return 0
}

// writeOut writes files into out (force: replacing those there) and, when
// secret, their Secret to path, or stdout when empty.
func (c *certsCmd) writeOut(out string, files []outFile, force, secret bool, path, namespace, name string) error {
	if err := writeFiles(out, files, force, "give --force to replace them, or another --out"); err != nil || !secret {
		return err
	}
	manifest, err := secretManifest(namespace, name, files)
	if err != nil {
		return err
	}
	if path == "" {
		_, err := c.stdout.Write(manifest)
		return err
	}
	return writeFiles(filepath.Dir(path), []outFile{{filepath.Base(path), manifest, 0o600}}, true, "")
}

func validTrustDomain(td string) error {
	if errs := validation.IsDNS1123Subdomain(td); len(errs) > 0 {
		return fmt.Errorf("invalid trust domain %q: %s", td, strings.Join(errs, "; "))
	}
	return nil
}

func validSecret(namespace, name string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("--namespace: invalid namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("--secret-name: invalid Secret name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// outFile is a file a step writes.
type outFile struct {
	name string
	data []byte
	mode os.FileMode
}

// The making of each step, apart from the files: certificates in, file
// contents out.

// makeRoot makes a root of trustDomain valid for valid from now.
func makeRoot(trustDomain string, now time.Time, valid time.Duration) ([]outFile, *x509.Certificate, error) {
	root, err := trust.NewRoot(trustDomain, now.Add(-trust.Backdate), now.Add(valid))
	if err != nil {
		return nil, nil, err
	}
	return caFiles(root, rootCertFile, rootKeyFile)
}

// caFiles is ca as the files certName and keyName, then extra, and its
// certificate.
func caFiles(ca *trust.CA, certName, keyName string, extra ...outFile) ([]outFile, *x509.Certificate, error) {
	key, err := trust.KeyPEM(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return append([]outFile{{certName, trust.CertPEM(ca.Cert), 0o644}, {keyName, key, 0o600}}, extra...), ca.Cert, nil
}

// loadRoot reads the root that 'certs root' wrote into dir.
func loadRoot(dir string) (*trust.CA, error) {
	files, err := readFiles(dir, "--root is the directory 'coredns-mc certs root' wrote", rootCertFile, rootKeyFile)
	if err != nil {
		return nil, err
	}
	root, _, err := trust.ParseCA(files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, rootCertFile), err)
	}
	if err := root.Cert.CheckSignatureFrom(root.Cert); err != nil {
		return nil, fmt.Errorf("%s: %q is not a root (not self-signed): the root signs the clusters' intermediates", filepath.Join(dir, rootCertFile), root.Cert.Subject.CommonName)
	}
	return root, nil
}

// readFiles reads the files names of dir, in order; hint says what dir
// should be when one is missing.
func readFiles(dir, hint string, names ...string) ([][]byte, error) {
	out := make([][]byte, len(names))
	for i, name := range names {
		var err error
		if out[i], err = os.ReadFile(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (%s)", err, hint)
		} else if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rootTrustDomain is the trust domain of root's intermediates: the one the
// root names, or, for a root that names none, fromFlag or the default.
func rootTrustDomain(root *x509.Certificate, fromFlag string) (string, error) {
	td, ok := trust.RootTrustDomain(root)
	switch {
	case ok && fromFlag != "" && fromFlag != td:
		return "", fmt.Errorf("--trust-domain %s, but the root is of trust domain %s", fromFlag, td)
	case ok:
		return td, nil
	case fromFlag == "":
		return trust.DefaultTrustDomain, nil
	}
	return fromFlag, validTrustDomain(fromFlag)
}

// validUntil is the end of a certificate valid for valid from now, cut to
// its issuer's end; cut says whether it was.
func validUntil(now time.Time, valid time.Duration, issuerCert *x509.Certificate) (time.Time, bool) {
	end := now.Add(valid)
	if end.After(issuerCert.NotAfter) {
		return issuerCert.NotAfter, true
	}
	return end, false
}

// makeIntermediate makes cluster's intermediate, signed by root: tls.crt
// (the intermediate), tls.key and ca.crt (the root). A cert-manager CA
// Issuer adds the Secret's ca.crt to the chain it signs with, so that the
// gateway Secrets it writes get the root as ca.crt.
func makeIntermediate(root *trust.CA, trustDomain, cluster string, now, notAfter time.Time) ([]outFile, *x509.Certificate, error) {
	in, err := root.NewIntermediate(trustDomain, cluster, now.Add(-trust.Backdate), notAfter)
	if err != nil {
		return nil, nil, err
	}
	return caFiles(in, tlsCertFile, tlsKeyFile, outFile{caCertFile, trust.CertPEM(root.Cert), 0o644})
}

// issuerSet is a cluster's intermediate as 'certs cluster' wrote it.
type issuerSet struct {
	ca                   *trust.CA
	cluster, trustDomain string // what the intermediate names
	rootsPEM             []byte // its ca.crt
}

// loadIssuer reads a cluster's intermediate from dir and checks it: a CA
// that chains to a root of dir's ca.crt and names a cluster.
func loadIssuer(dir string) (*issuerSet, error) {
	files, err := readFiles(dir, "--issuer is the directory 'coredns-mc certs cluster' wrote", tlsCertFile, tlsKeyFile, caCertFile)
	if err != nil {
		return nil, err
	}
	return parseIssuer(files[0], files[1], files[2], filepath.Join(dir, tlsCertFile))
}

// parseIssuer checks an intermediate (certPEM, keyPEM) against roots; name
// is certPEM's file, for errors.
func parseIssuer(certPEM, keyPEM, rootsPEM []byte, name string) (*issuerSet, error) {
	ca, rest, err := trust.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if ca.Cert.CheckSignatureFrom(ca.Cert) == nil {
		return nil, fmt.Errorf("%s: %q is a root: a gateway certificate is issued by its cluster's intermediate (coredns-mc certs cluster makes it)",
			name, ca.Cert.Subject.CommonName)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootsPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate", filepath.Join(filepath.Dir(name), caCertFile))
	}
	inters := x509.NewCertPool()
	for _, c := range rest {
		inters.AddCert(c)
	}
	if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return nil, fmt.Errorf("%s: %w: make a new intermediate with coredns-mc certs cluster (deploy/certificates.md)", name, err)
		}
		return nil, fmt.Errorf("%s does not chain to %s: %w", name, caCertFile, err)
	}
	i := slices.IndexFunc(ca.Cert.URIs, func(u *url.URL) bool { return u.Scheme == "spiffe" })
	if i < 0 || ca.Cert.URIs[i].Host == "" {
		return nil, fmt.Errorf("%s: intermediate %q names no cluster (no spiffe URI SAN): make one with coredns-mc certs cluster", name, ca.Cert.Subject.CommonName)
	}
	id := ca.Cert.URIs[i].Host
	cluster, err := trust.ClusterOf(ca.Cert, id)
	if err != nil {
		return nil, fmt.Errorf("%s: intermediate %q: %w", name, ca.Cert.Subject.CommonName, err)
	}
	return &issuerSet{ca: ca, cluster: cluster, trustDomain: id, rootsPEM: rootsPEM}, nil
}

// makeGateway makes the gateway certificate of in's cluster, issued by in:
// tls.crt (the certificate, then the intermediate), tls.key and ca.crt
// (roots). The set is put through the gateway's own checks before it is
// returned, with when it expires: nothing is written that a gateway would
// refuse.
func makeGateway(in *issuerSet, now, notAfter time.Time, roots []byte) ([]outFile, time.Time, error) {
	cert, key, err := in.ca.NewGateway(in.trustDomain, in.cluster, now.Add(-trust.Backdate), notAfter)
	if err != nil {
		return nil, time.Time{}, err
	}
	keyPEM, err := trust.KeyPEM(key)
	if err != nil {
		return nil, time.Time{}, err
	}
	chain := trust.CertPEM(cert, in.ca.Cert)
	cluster, expiry, err := gateway.CheckCertificates(chain, keyPEM, roots, in.trustDomain)
	if err != nil {
		return nil, time.Time{}, err
	}
	if cluster != in.cluster {
		return nil, time.Time{}, fmt.Errorf("the certificate names %q, not %q", cluster, in.cluster)
	}
	return []outFile{
		{tlsCertFile, chain, 0o644},
		{tlsKeyFile, keyPEM, 0o600},
		{caCertFile, roots, 0o644},
	}, expiry, nil
}

// secretManifest is the YAML of a Secret of type kubernetes.io/tls with
// files' tls.crt, tls.key and ca.crt, for kubectl apply -f -.
func secretManifest(namespace, name string, files []outFile) ([]byte, error) {
	data := map[string][]byte{}
	for _, f := range files {
		data[f.name] = f.data
	}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, caCertFile} {
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("no %s for the Secret", k)
		}
	}
	return grant.YAML(&corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       data[corev1.TLSCertKey],
			corev1.TLSPrivateKeyKey: data[corev1.TLSPrivateKeyKey],
			caCertFile:              data[caCertFile],
		},
	})
}

// writeFiles writes files into dir, made (0700) if missing, all or none:
// each is written to a temporary file of dir first, and once they all are,
// each takes its name (rename, or link when nothing may be replaced). A
// reader sees the old file or the new one, never half of one. Without
// replace, a file that exists is an error, and nothing is written; hint
// says what to do then.
func writeFiles(dir string, files []outFile, replace bool, hint string) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !replace {
		var exist []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, f.name)); err == nil {
				exist = append(exist, filepath.Join(dir, f.name))
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("refusing to overwrite %s: %s", strings.Join(exist, ", "), hint)
		}
	}
	temps := make([]string, len(files))
	var placed []string
	defer func() {
		for _, t := range temps {
			if t != "" {
				os.Remove(t)
			}
		}
		if err != nil && !replace {
			// New names only: nothing that was there is lost.
			for _, p := range placed {
				os.Remove(p)
			}
		}
	}()
	for i, f := range files {
		tmp, err := os.CreateTemp(dir, "."+f.name+".tmp-*")
		if err != nil {
			return err
		}
		temps[i] = tmp.Name()
		_, err = tmp.Write(f.data)
		if err == nil {
			err = tmp.Chmod(f.mode)
		}
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	for i, f := range files {
		dst := filepath.Join(dir, f.name)
		switch {
		case replace:
			err = os.Rename(temps[i], dst)
		default:
			// A link fails, where a rename would replace, if
			// the name appeared since the check.
			err = os.Link(temps[i], dst)
			if errors.Is(err, fs.ErrExist) {
				err = fmt.Errorf("refusing to overwrite %s, which appeared meanwhile: %s", dst, hint)
			} else if err != nil {
				// A file system without hard links.
				if _, serr := os.Lstat(dst); errors.Is(serr, fs.ErrNotExist) {
					err = os.Rename(temps[i], dst)
				}
			}
		}
		if err != nil {
			return err
		}
		if replace {
			temps[i] = ""
		}
		placed = append(placed, dst)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the names, too, on disk
		d.Close()
	}
	return nil
}

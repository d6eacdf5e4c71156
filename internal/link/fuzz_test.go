package link

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The fuzz targets run their seeds with every `go test`; test/tools/fuzz.sh
// runs each with -fuzz for $FUZZTIME. A failing input found goes into
// testdata/fuzz/<target>/ with the fix, so that it stays a test.

// allowOf makes an Allow of the five low bits of b, in the order of the
// Reasons.
func allowOf(b uint8) Allow {
	return Allow{Exec: b&1 != 0, AuthProvider: b&2 != 0, Files: b&4 != 0, HTTP: b&8 != 0, SkipTLSVerify: b&16 != 0}
}

// fuzzSeedKubeconfigs are kubeconfigs the fuzzer starts from: the clean
// one, each hostile one, one with a second unused context, and a few
// written by hand (JSON, a relative path, a server with a password).
func fuzzSeedKubeconfigs(f *testing.F) [][]byte {
	f.Helper()
	out := [][]byte{secretWith(f, hostile(nil))}
	for _, tc := range hostileKubeconfigs {
		out = append(out, secretWith(f, hostile(tc.edit)))
	}
	two := hostile(nil)
	two.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "evil"}, TokenFile: "/etc/token"}
	two.Clusters["other"] = &clientcmdapi.Cluster{Server: "http://other.example", InsecureSkipTLSVerify: true}
	two.Contexts["other"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	out = append(out, secretWith(f, two))
	out = append(out,
		[]byte(`{"apiVersion":"v1","kind":"Config","current-context":"c","contexts":[{"name":"c","context":{"cluster":"c","user":"u"}}],`+
			`"clusters":[{"name":"c","cluster":{"server":"https://west.example:6443","certificate-authority-data":"Y2E="}}],"users":[{"name":"u","user":{"token":"t"}}]}`),
		[]byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n"+
			"clusters:\n- name: c\n  cluster: {server: 'HTTPS://me:pw@west.example', proxy-url: 'http://proxy.example:3128', tls-server-name: west}\n"+
			"users:\n- name: u\n  user: {token: t, client-key: ./key, username: a, password: b}\n"),
		[]byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: c, user: u, namespace: x}\n"+
			"clusters:\n- name: c\n  cluster: {server: 'https:west.example'}\n"+
			"users:\n- name: u\n  user: {auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}}\n"),
		[]byte(""),
		[]byte("not: [a kubeconfig"),
	)
	return out
}

// FuzzFromSecret feeds link Secrets with any kubeconfig, name and label to
// FromSecret under any policy, and checks the promise of the hostile-
// kubeconfig policy (policy.go) on what comes out: nothing panics; a
// kubeconfig accepted yields a REST config that runs no command, calls no
// auth-provider, names no file to read, speaks nothing but https to a
// verified server, except as far as the policy allows; a refusal names a
// reason the policy does not allow, and the Secret; and the policy is
// monotonic: what the strictest policy accepts, any accepts, with the same
// server and credentials, and a feature refused under a policy is refused
// under the strictest.
func FuzzFromSecret(f *testing.F) {
	for i, kc := range fuzzSeedKubeconfigs(f) {
		f.Add(kc, "cluster-credentials-west", "", uint8(0))
		f.Add(kc, "link", "paris", uint8(i%32))
		f.Add(kc, "cluster-credentials-", "", uint8(31))
	}
	f.Fuzz(func(t *testing.T, kc []byte, secretName, clusterLabel string, allowBits uint8) {
		if len(kc) > 64<<10 {
			return // a Secret holds at most 1 MiB; size is not the point
		}
		var lbls map[string]string
		if clusterLabel != "" {
			lbls = map[string]string{labels.LinkClusterName: clusterLabel}
		}
		s := secret(secretName, lbls, kc)
		allow := allowOf(allowBits)
		name, cfg, err := FromSecret(s, allow)
		strictName, strict, strictErr := FromSecret(s, Allow{})

		checkOutcome(t, s, allow, name, cfg, err)
		checkOutcome(t, s, Allow{}, strictName, strict, strictErr)

		// Monotonic: the strictest policy accepts less.
		if strictErr == nil {
			require.NoError(t, err, "accepted with no feature allowed, refused with %s", allow)
			require.Equal(t, [5]string{strictName, strict.Host, strict.BearerToken, strict.Username, strict.Password},
				[5]string{name, cfg.Host, cfg.BearerToken, cfg.Username, cfg.Password}, "allowing %s changed a clean link", allow)
			// What a client of it would load must not panic; bad inline
			// data only fails the link when it is dialled.
			_, _ = rest.TLSConfigFor(strict)
		}
		if err != nil && ReasonOf(err) != ReasonInvalid {
			require.False(t, strictErr == nil || ReasonOf(strictErr) == ReasonInvalid, "refused for %s with %s allowed, yet accepted or invalid with nothing allowed: %v", ReasonOf(err), allow, strictErr)
		}
	})
}

// checkOutcome checks one result of FromSecret(s, allow).
func checkOutcome(t *testing.T, s *corev1.Secret, allow Allow, name string, cfg *rest.Config, err error) {
	t.Helper()
	if err != nil {
		require.True(t, cfg == nil && name == "", "refused (%v) with a config or name: %q %v", err, name, cfg)
		require.True(t, strings.HasPrefix(err.Error(), "secret "+s.Namespace+"/"+s.Name+": "),
			"error does not name the Secret: %v", err)
		r := ReasonOf(err)
		require.True(t, slices.Contains(Reasons, r) && r != ReasonReserved && r != ReasonDuplicate,
			"reason %q for %v", r, err)
		require.False(t, r != ReasonInvalid && allow.allows(r), "refused for %s, which %s allows: %v", r, allow, err)
		return
	}
	require.NotNil(t, cfg, "accepted without a config")
	want, ok := ClusterNameOf(s)
	require.True(t, ok && name == want, "cluster %q, the Secret names %q (%t)", name, want, ok)
	require.NoError(t, labels.ValidateClusterName(name), "accepted an invalid cluster name")
	require.False(t, cfg.ExecProvider != nil && !allow.Exec, "exec plugin %+v accepted with %s", cfg.ExecProvider, allow)
	require.False(t, cfg.AuthProvider != nil && !allow.AuthProvider, "auth-provider %+v accepted with %s", cfg.AuthProvider, allow)
	if !allow.Files {
		for field, path := range map[string]string{
			"tokenFile": cfg.BearerTokenFile, "client-certificate": cfg.CertFile,
			"client-key": cfg.KeyFile, "certificate-authority": cfg.CAFile,
		} {
			require.Empty(t, path, "%s accepted with %s", field, allow)
		}
	}
	require.False(t, cfg.Insecure && !allow.SkipTLSVerify, "insecure-skip-tls-verify accepted with %s", allow)
	if !allow.HTTP {
		// The URL the client will use, as client-go makes it.
		u, _, err := rest.DefaultServerUrlFor(cfg)
		require.False(t, err == nil && u.Scheme != "https", "server %q (used as %q) accepted with %s", cfg.Host, u.Redacted(), allow)
		if p, perr := url.Parse(cfg.Host); perr != nil || !strings.EqualFold(p.Scheme, "https") {
			t.Fatalf("server %q accepted with %s", cfg.Host, allow)
		}
	}
}

// FuzzKubeconfigFields is FuzzFromSecret with the kubeconfig built from
// fuzzed fields, so that the fuzzer spends its time on what a hostile
// writer puts in a well-formed kubeconfig (the server URL, file paths, a
// proxy, the TLS server name, an exec plugin or auth-provider, the flags)
// rather than on YAML syntax: the same checks, through clientcmd's own
// encoding and decoding.
func FuzzKubeconfigFields(f *testing.F) {
	f.Add("https://west.example:6443", "", "", "", "", "", "", uint8(0), uint8(0))
	f.Add("http://west.example:8080", "/var/run/secrets/kubernetes.io/serviceaccount/token", "", "", "", "", "", uint8(0), uint8(0))
	f.Add("HTTPS://me:pw@west.example", "", "./crt", "../key", "/etc/ca.crt", "http://proxy.example:3128", "west", uint8(3), uint8(31))
	f.Add("https:west.example", "token", "", "", "", "socks5://p", "", uint8(4), uint8(8))
	f.Add("west.example:6443", "", "", "", "", "", "", uint8(8), uint8(0))
	f.Add(" https://west.example", "", "", "", "", "", "", uint8(16), uint8(16))
	f.Fuzz(func(t *testing.T, server, tokenFile, certFile, keyFile, caFile, proxy, tlsName string, features, allowBits uint8) {
		cfg := clientcmdapi.NewConfig()
		u := &clientcmdapi.AuthInfo{Token: "t", TokenFile: tokenFile, ClientCertificate: certFile, ClientKey: keyFile}
		if features&1 != 0 {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}
		if features&2 != 0 {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}
		c := &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile, ProxyURL: proxy, TLSServerName: tlsName,
			InsecureSkipTLSVerify: features&4 != 0}
		if features&8 == 0 {
			c.CertificateAuthorityData = []byte("ca")
		}
		cfg.AuthInfos["u"], cfg.Clusters["c"] = u, c
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		if features&16 != 0 { // an unused context, hostile in every way
			cfg.AuthInfos["x"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "evil"}, TokenFile: "/etc/shadow"}
			cfg.Clusters["x"] = &clientcmdapi.Cluster{Server: "http://x", InsecureSkipTLSVerify: true, CertificateAuthority: "/etc/x"}
			cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "x", AuthInfo: "x"}
		}
		cfg.CurrentContext = "c"
		kc, err := clientcmd.Write(*cfg)
		if err != nil {
			return
		}
		s := secret("cluster-credentials-west", nil, kc)
		allow := allowOf(allowBits)
		name, rc, err := FromSecret(s, allow)
		checkOutcome(t, s, allow, name, rc, err)
		strictName, strict, strictErr := FromSecret(s, Allow{})
		checkOutcome(t, s, Allow{}, strictName, strict, strictErr)
		if strictErr == nil {
			require.False(t, err != nil || rc.Host != strict.Host, "accepted with nothing allowed (%q), not with %s: %v", strict.Host, allow, err)
			// What a client of it would load must not panic; bad inline
			// data only fails the link when it is dialled.
			_, _ = rest.TLSConfigFor(strict)
		}
	})
}

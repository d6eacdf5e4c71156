package link

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// hostile returns a kubeconfig of one context, "c", whose user and cluster
// are changed by edit from a clean one: a token, https, CA data.
func hostile(edit func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster)) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	u := &clientcmdapi.AuthInfo{Token: "t"}
	c := &clientcmdapi.Cluster{Server: "https://west.example:6443", CertificateAuthorityData: []byte("ca")}
	if edit != nil {
		edit(u, c)
	}
	cfg.AuthInfos["u"], cfg.Clusters["c"] = u, c
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	return cfg
}

var hostileKubeconfigs = []struct {
	name   string
	edit   func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster)
	reason Reason
	fault  string
}{
	{"exec", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
	}, ReasonExec, `user "u" runs a command (exec "/bin/sh")`},
	{"auth-provider", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
		u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
	}, ReasonAuthProvider, `user "u" uses auth-provider "oidc"`},
	{"tokenFile", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
		u.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	}, ReasonFiles, `user "u" reads file "/var/run/secrets/kubernetes.io/serviceaccount/token" (tokenFile)`},
	{"relative tokenFile", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) { u.TokenFile = "token" },
		ReasonFiles, `user "u" reads file "token" (tokenFile)`},
	{"client-certificate", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) { u.ClientCertificate = "/etc/tls.crt" },
		ReasonFiles, `(client-certificate)`},
	{"client-key", func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) { u.ClientKey = "../tls.key" },
		ReasonFiles, `user "u" reads file "../tls.key" (client-key)`},
	{"certificate-authority", func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) { c.CertificateAuthority = "/etc/ca.crt" },
		ReasonFiles, `cluster "c" reads file "/etc/ca.crt" (certificate-authority)`},
	{"http", func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) { c.Server = "http://west.example:8080" },
		ReasonHTTP, `cluster "c": server "http://west.example:8080" is not https://`},
	{"no scheme", func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) { c.Server = "west.example:8080" },
		ReasonHTTP, `is not https://`},
	{"password in an http URL", func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) { c.Server = "http://me:secret@west.example" },
		ReasonHTTP, `server "http://me:xxxxx@west.example" is not https://`},
	{"insecure-skip-tls-verify", func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
		c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
	}, ReasonSkipTLSVerify, `cluster "c" sets insecure-skip-tls-verify`},
}

func TestCheck(t *testing.T) {
	require.NoError(t, Check(hostile(nil), Allow{}), "a clean kubeconfig")
	for _, tc := range hostileKubeconfigs {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(hostile(tc.edit), Allow{})
			var refused *RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, tc.reason, refused.Reason)
			assert.Equal(t, tc.reason, ReasonOf(err))
			assert.Contains(t, err.Error(), tc.fault)
			assert.Contains(t, err.Error(), "("+string(tc.reason)+" not allowed)")

			// Allowing that one feature, and only it, lets it through.
			for _, feature := range allowValues {
				var allow Allow
				require.NoError(t, allow.Set(string(feature)))
				err := Check(hostile(tc.edit), allow)
				assert.Equal(t, feature == tc.reason, err == nil, "allowing %s: %v", feature, err)
			}
		})
	}
}

func TestCheckEveryFault(t *testing.T) {
	cfg := hostile(func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
		c.Server, c.InsecureSkipTLSVerify = "http://x", true
		u.TokenFile = "/t"
		u.Exec = &clientcmdapi.ExecConfig{Command: "evil"}
	})
	err := Check(cfg, Allow{})
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, ReasonExec, refused.Reason, "the first reason in the order of Reasons")
	assert.Len(t, refused.Faults, 4, "every fault is listed: %v", err)

	err = Check(cfg, Allow{Exec: true, HTTP: true})
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, ReasonFiles, refused.Reason)
	assert.Len(t, refused.Faults, 2, "%v", err)
}

func TestAllowSet(t *testing.T) {
	var a Allow
	assert.Equal(t, "none", a.String())
	for _, v := range []string{"exec", "auth-provider", "files", "http", "skip-tls-verify"} {
		require.NoError(t, a.Set(v))
	}
	assert.Equal(t, Allow{Exec: true, AuthProvider: true, Files: true, HTTP: true, SkipTLSVerify: true}, a)
	assert.Equal(t, "exec,auth-provider,files,http,skip-tls-verify", a.String())
	assert.EqualError(t, a.Set("all"), `unknown value "all" (want exec, auth-provider, files, http, skip-tls-verify)`)
}

func secretWith(t testing.TB, cfg *clientcmdapi.Config) []byte {
	t.Helper()
	b, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return b
}

// Every hostile kubeconfig is refused by FromSecret, with its reason, and
// before clientcmd would read a file: a tokenFile that does not exist is
// refused as a file reference, not reported missing.
func TestFromSecretRefusesHostileKubeconfigs(t *testing.T) {
	for _, tc := range hostileKubeconfigs {
		t.Run(tc.name, func(t *testing.T) {
			s := secret("cluster-credentials-west", nil, secretWith(t, hostile(tc.edit)))
			_, cfg, err := FromSecret(s, Allow{})
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.Equal(t, tc.reason, ReasonOf(err))
			assert.True(t, strings.HasPrefix(err.Error(), "secret linkerd-multicluster/cluster-credentials-west: kubeconfig refused: "), err.Error())
			assert.NotContains(t, err.Error(), "no such file")
		})
	}
}

func TestFromSecretInvalid(t *testing.T) {
	for name, edit := range map[string]func(*clientcmdapi.Config){
		"no current-context":       func(c *clientcmdapi.Config) { c.CurrentContext = "" },
		"missing current-context":  func(c *clientcmdapi.Config) { c.CurrentContext = "nope" },
		"context names no cluster": func(c *clientcmdapi.Config) { c.Contexts["c"].Cluster = "" },
		"missing cluster":          func(c *clientcmdapi.Config) { delete(c.Clusters, "c") },
		"missing user":             func(c *clientcmdapi.Config) { delete(c.AuthInfos, "u") },
	} {
		cfg := hostile(nil)
		edit(cfg)
		_, _, err := FromSecret(secret("cluster-credentials-west", nil, secretWith(t, cfg)), Allow{})
		assert.ErrorContains(t, err, "bad kubeconfig", name)
		assert.Equal(t, ReasonInvalid, ReasonOf(err), name)
	}
	assert.Equal(t, ReasonInvalid, ReasonOf(errors.New("other")))
}

// Only the current context counts: an exec plugin in an unused user is
// neither refused nor carried into the REST config.
func TestFromSecretUsesTheCurrentContextOnly(t *testing.T) {
	cfg := hostile(nil)
	cfg.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "evil"}}
	cfg.Clusters["other"] = &clientcmdapi.Cluster{Server: "http://other.example"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	_, rc, err := FromSecret(secret("cluster-credentials-west", nil, secretWith(t, cfg)), Allow{})
	require.NoError(t, err)
	assert.Equal(t, "https://west.example:6443", rc.Host)
	assert.Nil(t, rc.ExecProvider)
	assert.Equal(t, "t", rc.BearerToken)
}

// tlsServer records the Authorization headers it receives and answers every
// request with an empty Service list.
type tlsServer struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []string
}

func newTLSServer(t *testing.T) *tlsServer {
	s := &tlsServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.tokens = append(s.tokens, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *tlsServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

// The exec and tokenFile kubeconfigs do what they say when allowed (the
// command runs, the file's token is sent), so that their refusal above is
// what keeps both from happening.
func TestAllowedKubeconfigsAreUsed(t *testing.T) {
	srv := newTLSServer(t)
	caPEM := pemCert(srv.Certificate().Raw)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("from-file"), 0o600))

	execCfg := hostile(func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
		u.Token = ""
		u.Exec = &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			Command: "/bin/sh",
			Args: []string{"-c", `touch "$0"; echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-exec"}}'`,
				marker},
		}
		c.Server, c.CertificateAuthorityData = srv.URL, caPEM
	})
	fileCfg := hostile(func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
		u.Token, u.TokenFile = "", tokenFile
		c.Server, c.CertificateAuthorityData = srv.URL, caPEM
	})

	list := func(t *testing.T, kc *clientcmdapi.Config, allow Allow) error {
		_, rc, err := FromSecret(secret("cluster-credentials-west", nil, secretWith(t, kc)), allow)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(rc)
		require.NoError(t, err)
		_, err = client.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		return nil
	}

	assert.Equal(t, ReasonExec, ReasonOf(list(t, execCfg, Allow{})))
	assert.Equal(t, ReasonFiles, ReasonOf(list(t, fileCfg, Allow{})))
	assert.NoFileExists(t, marker)
	assert.Empty(t, srv.seen(), "a refused kubeconfig sent a request")

	require.NoError(t, list(t, execCfg, Allow{Exec: true}))
	assert.FileExists(t, marker)
	require.NoError(t, list(t, fileCfg, Allow{Files: true}))
	assert.Equal(t, []string{"Bearer from-exec", "Bearer from-file"}, srv.seen())
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

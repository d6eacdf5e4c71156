package dns_test

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// execKubeconfig returns a kubeconfig for remote whose user is an exec
// plugin: a shell that creates marker, then hands out the read-only link
// token. Used, it works; so only its refusal keeps the marker away.
func execKubeconfig(t *testing.T, remote *harness.Cluster, marker string) []byte {
	t.Helper()
	return editKubeconfig(t, remote.LinkData(t), func(user *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
		cred := fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":%q}}`, user.Token)
		*user = clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			APIVersion:      "client.authentication.k8s.io/v1",
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			Command:         "/bin/sh",
			Args:            []string{"-c", `touch "$0" && printf '%s' "$1"`, marker, cred},
		}}
	})
}

// editKubeconfig returns kubeconfig with what edit makes of the user and
// the cluster of its current context.
func editKubeconfig(t *testing.T, kubeconfig []byte,
	edit func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster)) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	require.NoError(t, err)
	ctxt := cfg.Contexts[cfg.CurrentContext]
	edit(cfg.AuthInfos[ctxt.AuthInfo], cfg.Clusters[ctxt.Cluster])
	out, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return out
}

// tokenFileKubeconfig returns a kubeconfig whose user's token is read from
// tokenFile and whose server is server, trusted through caPEM.
func tokenFileKubeconfig(t *testing.T, server string, caPEM []byte, tokenFile string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	out, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return out
}

// tokenCatcher is an HTTPS server that records every Authorization header
// (and every request: an empty header is recorded too).
type tokenCatcher struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func newTokenCatcher(t *testing.T) *tokenCatcher {
	c := &tokenCatcher{}
	c.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.got = append(c.got, r.Header.Get("Authorization"))
		c.mu.Unlock()
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *tokenCatcher) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func (c *tokenCatcher) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.srv.Certificate().Raw})
}

// waitMetricAbove waits until series at url exceeds before. The metrics
// listener may be away for a moment (a reload restarts it): a failed read
// is a "not yet".
func waitMetricAbove(t *testing.T, url, series string, before float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, _, err := harness.ScrapeSeries(url, series)
		return err == nil && v > before
	}, 30*time.Second, 50*time.Millisecond, "%s did not move from %v", series, before)
}

// waitLogLine waits until the process's log has a line containing want.
func waitLogLine(t *testing.T, p *harness.Process, want string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, p.Log(c), want)
	}, 30*time.Second, 50*time.Millisecond, "log line %q", want)
}

// A link Secret is data: its kubeconfig may not run a command in the DNS
// pod, nor have a file of the pod read and its content sent. Refused, such
// a Secret is logged and counted, nothing is run and no token leaves; with
// allow_insecure_kubeconfig the same Secrets are used, which proves the
// refusal is what stopped them.
func TestHostileLinkSecrets(t *testing.T) {
	ctx, east, west, paris := setUp(t)
	const ns, linkNS = "hostile", "hostile-links"
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	westEPs := west.WaitEndpoints(t, ns, "nginx-svc", 1)
	parisEPs := paris.WaitEndpoints(t, ns, "nginx-svc", 1)
	require.NoError(t, east.Apply(ctx, harness.Namespace(linkNS)))
	secrets := east.Client.CoreV1().Secrets(linkNS)

	dir := t.TempDir()
	westMarker, parisMarker := filepath.Join(dir, "west-exec-ran"), filepath.Join(dir, "paris-exec-ran")
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("pod-token"), 0o600))
	catcher := newTokenCatcher(t)

	s := startDNS(t, nil, "link_secrets "+linkNS)
	const execSeries, filesSeries = `coredns_mcmirror_link_refused_total{reason="exec"}`, `coredns_mcmirror_link_refused_total{reason="files"}`
	execBefore, filesBefore := s.Value(t, execSeries), s.Value(t, filesSeries)

	east.CreateLinkSecret(t, linkNS, "paris", paris.LinkData(t))
	east.CreateLinkSecret(t, linkNS, "west", execKubeconfig(t, west, westMarker))
	east.CreateLinkSecret(t, linkNS, "tokyo", tokenFileKubeconfig(t, catcher.srv.URL, catcher.caPEM(), tokenFile))

	// Positive evidence first: both refusals counted and logged, the good
	// Secret linked, the process alive.
	waitMetricAbove(t, s.MetricsURL, execSeries, execBefore)
	waitMetricAbove(t, s.MetricsURL, filesSeries, filesBefore)
	waitLogLine(t, s.Process, "link secret "+linkNS+`/cluster-credentials-west refused (exec): kubeconfig refused: user "mcmirror-link" runs a command (exec "/bin/sh")`)
	waitLogLine(t, s.Process, "link secret "+linkNS+`/cluster-credentials-tokyo refused (files): kubeconfig refused: user "u" reads file "`+tokenFile+`" (tokenFile)`)
	parisName := "nginx-svc-paris." + ns + "." + zone
	eventuallyAnswers(t, s, parisName, values(parisEPs))
	env.RequireAlive(t, s.Process)

	assert.NoFileExists(t, westMarker, "the exec plugin ran")
	assert.Empty(t, catcher.requests(), "the tokenFile kubeconfig sent requests")
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", "nginx-svc-west."+ns+"."+zone, dns.TypeA).Rcode, "west is not linked")

	// A hostile update of a running link is refused too, and the link
	// keeps running on its last good kubeconfig.
	execBefore = s.Value(t, execSeries)
	paris2, err := secrets.Get(ctx, "cluster-credentials-paris", metav1.GetOptions{})
	require.NoError(t, err)
	paris2.Data[labels.LinkSecretKey] = execKubeconfig(t, paris, parisMarker)
	_, err = secrets.Update(ctx, paris2, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitMetricAbove(t, s.MetricsURL, execSeries, execBefore)
	waitLogLine(t, s.Process, "link secret "+linkNS+`/cluster-credentials-paris refused (exec)`)
	waitLogLine(t, s.Process, `keeping the running link to cluster "paris"`)
	env.RequireAlive(t, s.Process)
	assert.Equal(t, values(parisEPs), harness.Answers(s.Ask(t, "udp", parisName, dns.TypeA)), "paris kept")
	assert.NoFileExists(t, parisMarker, "the exec plugin ran")
	assert.Empty(t, catcher.requests(), "the tokenFile kubeconfig sent requests")
	s.Process.Stop()

	// Allowed, the same Secrets are used: the commands run, west is
	// answered through the exec credential, and the file's token goes to
	// the server the kubeconfig names.
	s2 := startDNS(t, nil, "link_secrets "+linkNS, "allow_insecure_kubeconfig exec files")
	eventuallyAnswers(t, s2, "nginx-svc-west."+ns+"."+zone, values(westEPs))
	eventuallyAnswers(t, s2, parisName, values(parisEPs))
	assert.FileExists(t, westMarker)
	assert.FileExists(t, parisMarker)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, catcher.requests(), "Bearer pod-token", "the token of the file sent")
	}, 30*time.Second, 50*time.Millisecond)
	env.RequireAlive(t, s2.Process)
	assert.Zero(t, s2.Value(t, execSeries)+s2.Value(t, filesSeries), "nothing refused when allowed")
	assert.NotContains(t, s2.Process.Log(t), "refused (")
}

// The other refusals, one Secret each: plain http, a server whose
// certificate is not verified, an auth-provider. Each is counted under its
// reason.
func TestRefusalReasons(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const linkNS = "refused-links"
	require.NoError(t, east.Apply(ctx, harness.Namespace(linkNS)))
	s := startDNS(t, nil, "link_secrets "+linkNS)

	good := west.LinkData(t)
	edit := func(f func(u *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster)) []byte {
		return editKubeconfig(t, good, f)
	}
	for _, tc := range []struct {
		cluster, reason string
		kc              []byte
	}{
		{"plain", "http", edit(func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
			c.Server = strings.Replace(c.Server, "https://", "http://", 1)
		})},
		{"unverified", "skip-tls-verify", edit(func(_ *clientcmdapi.AuthInfo, c *clientcmdapi.Cluster) {
			c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
		})},
		{"provider", "auth-provider", edit(func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"idp-issuer-url": "https://127.0.0.1:1"}}
		})},
	} {
		series := `coredns_mcmirror_link_refused_total{reason="` + tc.reason + `"}`
		before := s.Value(t, series)
		east.CreateLinkSecret(t, linkNS, tc.cluster, tc.kc)
		waitMetricAbove(t, s.MetricsURL, series, before)
		waitLogLine(t, s.Process, "link secret "+linkNS+"/cluster-credentials-"+tc.cluster+" refused ("+tc.reason+")")
	}
	env.RequireAlive(t, s.Process)
	log := s.Process.Log(t)
	assert.NotContains(t, log, "Linked cluster plain")
	assert.NotContains(t, log, "Linked cluster unverified")
	assert.NotContains(t, log, "Linked cluster provider")
}

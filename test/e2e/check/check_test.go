package check_test

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Installed and linked as deploy/README.md has it, every check passes, and
// each says what it saw: the real parts' ServiceAccounts, the mirror name
// answered by the real DNS, the link, the peer's gateway and certificate,
// the egress ports, the leader, the images.
func TestHealthy(t *testing.T) {
	f := setup(t)
	rep := healthy(t, f)

	assert.Equal(t, 1, rep.FormatVersion)
	assert.Equal(t, "east", rep.Cluster)
	assert.Equal(t, env.Cluster("east").Server, rep.Server)
	var ids []string
	for _, r := range rep.Results {
		if len(ids) == 0 || ids[len(ids)-1] != r.ID {
			ids = append(ids, r.ID)
		}
		assert.Empty(t, r.Fix, "no fix for an ok result: %+v", r)
	}
	assert.Equal(t, []string{"api", "cluster-name", "dns-source", "rbac-controller", "rbac-gateway", "rbac-dns", "rbac-link",
		"dns", "link", "gateway", "peer-reachable", "peer-certificate", "egress-ports", "controller-leader", "versions"}, ids)
	assert.Equal(t, len(rep.Results), rep.Summary.OK)

	for _, w := range []struct{ id, subject, msg string }{
		{"rbac-controller", "", "ServiceAccount mcmirror/mcmirror-controller may do all"},
		{"rbac-gateway", "", "ServiceAccount mcmirror/mcmirror-gateway may do all"},
		{"rbac-dns", "", "ServiceAccount kube-system/coredns may do all"},
		{"rbac-link", "", "ServiceAccount mcmirror/mcmirror-link may do all"},
		{"dns", "", f.dnsAddr + " (--dns-server) answers nginx-set-0.nginx-svc-west." + ns + ".svc.cluster.local with 10.96."},
		{"link", "west", "Secret mcmirror-links/cluster-credentials-west: " + env.Cluster("west").Server + " answers"},
		{"gateway", "", "ready; its certificate (cluster east) expires"},
		{"peer-reachable", "west", f.westIngress + " answers from here; the gateway's probe: alive"},
		{"peer-certificate", "west", f.westIngress + " is spiffe://mcmirror.dev/cluster/west, expires"},
		{"egress-ports", "", "controller and gateway agree on "},
		{"controller-leader", "", "leads (Lease mcmirror/mcmirror-controller renewed"},
		{"versions", "", "controller, gateway, cluster DNS run "},
	} {
		r, ok := rep.find(w.id, w.subject)
		if assert.True(t, ok, "a result %s %s", w.id, w.subject) {
			assert.Contains(t, r.Message, w.msg, "%s %s", w.id, w.subject)
		}
	}

	// The text report: one line per check, its status first.
	code, _, text := check(t, env.Cluster("east"), f, "-o", "text")
	assert.Equal(t, 0, code)
	t.Logf("the report:\n%s", text)
	ls := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	require.Greater(t, len(ls), len(rep.Results))
	assert.Equal(t, "mcmirror check of east at "+env.Cluster("east").Server, ls[0])
	for _, r := range rep.Results {
		name := r.ID
		if r.Subject != "" {
			name += " " + r.Subject
		}
		assert.True(t, slices.ContainsFunc(ls, func(l string) bool {
			fields := strings.Fields(l)
			return len(fields) > 2 && fields[0] == "ok" && strings.Contains(l, "  "+name+"  ")
		}), "a line `ok  %s  ...`:\n%s", name, text)
	}
	assert.Equal(t, "15 ok, 0 warn, 0 fail", ls[len(ls)-1])
}

// failing runs check until the result id/subject fails, and returns the
// report: check exits 1 and names it. Every fault below is one check
// failing with its fix, the rest of the fleet unchanged.
func failing(t *testing.T, f *fleet, id, subject string) (report, result) {
	t.Helper()
	var rep report
	var code int
	var res result
	until(t, id+" "+subject+" fails", func() (bool, string) {
		code, rep, _ = check(t, env.Cluster("east"), f, "-o", "json")
		var ok bool
		if res, ok = rep.find(id, subject); !ok {
			return false, "no result " + id + " " + subject
		}
		return res.Status == "fail", res.Status + ": " + res.Message
	})
	t.Logf("the report's results not ok:\n%s", rep.notOK())
	assert.Equal(t, 1, code, "a failed check makes the exit code 1")
	assert.NotEmpty(t, res.Fix, "a failure says what to do")
	assert.GreaterOrEqual(t, rep.Summary.Fail, 1)
	return rep, res
}

// stopped stops a part of the fleet, as a pod that dies, and returns what
// starts it again: the test calls it, or it is called when the test ends.
func stopped(t *testing.T, stop func(), start func() error) (restart func()) {
	stop()
	var once sync.Once
	restart = func() { once.Do(func() { require.NoError(t, start()) }) }
	t.Cleanup(restart)
	return restart
}

// until calls cond until it holds, for wait at most, on the test's own
// goroutine; the last state it reported is in the failure.
func until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s (last: %s)", wait, what, state)
		}
		time.Sleep(tick)
	}
}

// A peer's certificate that names another cluster: --peer west points at
// the gateway of paris, a real coredns-mc gateway whose certificate, of the
// same root, names paris. check fails peer-certificate west.
func TestPeerCertificateOfAnotherCluster(t *testing.T) {
	f := setup(t)
	healthy(t, f)
	ctx := context.Background()

	parisTLS, err := f.ca.IssueFiles(t.TempDir(), "paris", gatewaytest.Options{NotAfter: time.Now().Add(30 * 24 * time.Hour)})
	require.NoError(t, err)
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	ingress, metrics := harness.LoopbackAddr(harness.FreePort(t)), harness.LoopbackAddr(harness.FreePort(t))
	paris := &proc{name: "paris/gateway", argv: append([]string{bin, "gateway", "--cluster=paris", "--kubeconfig=" + env.Cluster("west").Kubeconfig,
		"--ingress-address=" + ingress, "--metrics-addr=" + metrics, "--egress=false", "--allow-cluster=east", "--drain-delay=0s"}, parisTLS.Args()...),
		readyURL: "http://" + metrics + "/readyz"}
	require.NoError(t, paris.start(ctx))
	t.Cleanup(paris.stop)

	require.NoError(t, setPeer(ctx, "west", ingress))
	t.Cleanup(func() { require.NoError(t, setPeer(ctx, "west", f.westIngress)) })

	rep, res := failing(t, f, "peer-certificate", "west")
	assert.Contains(t, res.Message, ingress+` presents the certificate of cluster "paris", not "west"`)
	assert.Contains(t, res.Fix, "--peer west=")
	// The rest holds: the fault is named, not a cascade.
	for _, r := range rep.Results {
		if slices.Contains([]string{"link", "dns", "controller-leader", "rbac-gateway"}, r.ID) {
			assert.Equal(t, "ok", r.Status, "%s %s: %s", r.ID, r.Subject, r.Message)
		}
	}
}

// The link Secret names another cluster than the gateway's --peer: the
// Secret links "paris" (with west's credentials), and west, a --peer, is
// linked by no Secret. check fails link west.
func TestLinkSecretOfAnotherCluster(t *testing.T) {
	f := setup(t)
	healthy(t, f)
	ctx := context.Background()
	secrets := env.Cluster("east").Client.CoreV1().Secrets("mcmirror-links")
	relabel := func(cluster string) {
		patch := `{"metadata":{"labels":{"` + labels.LinkClusterName + `":"` + cluster + `"}}}`
		_, err := secrets.Patch(ctx, labels.LinkSecretNamePrefix+"west", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	relabel("paris")
	t.Cleanup(func() { relabel("west") })

	rep, res := failing(t, f, "link", "west")
	assert.Contains(t, res.Message, "the gateway has --peer west, but no usable link Secret for west in mcmirror-links")
	assert.Contains(t, res.Fix, "coredns-mc link --context west --cluster west")
	paris, ok := rep.find("link", "paris")
	require.True(t, ok, "the Secret is reported under the cluster it names")
	assert.Equal(t, "ok", paris.Status, paris.Message)
}

// A peer's expired certificate: --peer west points at a server that
// presents west's certificate issued with NotAfter in the past. check
// fails peer-certificate west with the date.
func TestExpiredPeerCertificate(t *testing.T) {
	f := setup(t)
	healthy(t, f)
	ctx := context.Background()

	expired, err := f.ca.Issue("west", gatewaytest.Options{NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-2 * time.Hour)})
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(expired.CertPEM, expired.KeyPEM)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	handshakes := make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_ = c.(*tls.Conn).Handshake()
				select {
				case handshakes <- struct{}{}:
				default:
				}
			}()
		}
	}()

	require.NoError(t, setPeer(ctx, "west", ln.Addr().String()))
	t.Cleanup(func() { require.NoError(t, setPeer(ctx, "west", f.westIngress)) })

	_, res := failing(t, f, "peer-certificate", "west")
	assert.Contains(t, res.Message, "west's gateway certificate ("+ln.Addr().String()+") expired on ")
	assert.Contains(t, res.Message, "ago")
	assert.Contains(t, res.Fix, "renew it")
	select {
	case <-handshakes:
	default:
		t.Fatal("check never reached the server with the expired certificate")
	}
}

// The link Secret deleted: west is a --peer that nothing links. check
// fails link west; the Secret back, every check passes again.
func TestDeletedLinkSecret(t *testing.T) {
	f := setup(t)
	healthy(t, f)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")

	secrets := east.Client.CoreV1().Secrets("mcmirror-links")
	s, err := secrets.Get(ctx, labels.LinkSecretNamePrefix+"west", metav1.GetOptions{})
	require.NoError(t, err)
	restore := stopped(t, func() { require.NoError(t, secrets.Delete(ctx, s.Name, metav1.DeleteOptions{})) }, func() error {
		kc, err := west.LinkKubeconfig(ctx)
		if err != nil {
			return err
		}
		if err := createLinkSecret(ctx, kc); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})

	_, res := failing(t, f, "link", "west")
	assert.Contains(t, res.Message, "the gateway has --peer west, but no usable link Secret for west")

	restore()
	healthy(t, f)
}

// West's gateway stopped: its ingress refuses, and east's gateway sees it
// down. check fails peer-reachable west; started again, all pass.
func TestStoppedPeerGateway(t *testing.T) {
	f := setup(t)
	healthy(t, f)

	restart := stopped(t, f.westGW.Stop, f.westGW.Launch)
	_, res := failing(t, f, "peer-reachable", "west")
	assert.Contains(t, res.Message, f.westIngress)
	// East's gateway's prober marks west down after two failed probes:
	// check then reports what the gateway sees, not only what it saw
	// from here.
	until(t, "check reports what east's gateway sees of west", func() (bool, string) {
		_, rep, _ := check(t, env.Cluster("east"), f, "-o", "json")
		r, _ := rep.find("peer-reachable", "west")
		return r.Status == "fail" && strings.Contains(r.Message, "the gateway cannot reach west's ingress at "+f.westIngress), r.Status + ": " + r.Message
	})

	restart()
	healthy(t, f)
}

// East's own gateway stopped: the API server's proxy to its metrics Service
// finds nothing listening. check fails gateway.
func TestStoppedLocalGateway(t *testing.T) {
	f := setup(t)
	healthy(t, f)

	restart := stopped(t, f.eastGW.stop, func() error { return f.eastGW.start(context.Background()) })
	_, res := failing(t, f, "gateway", "")
	assert.Contains(t, res.Message, "no gateway pod serves Service mcmirror/mcmirror-gateway-metrics")

	restart()
	healthy(t, f)
}

// A cluster that is only linked to (west: deploy/remote-link.yaml, a
// gateway process but no Deployments) has no controller, DNS or gateway
// to check: each is reported absent, as ok, and check exits 0.
func TestOnlyLinkedTo(t *testing.T) {
	setup(t)
	code, rep, _ := check(t, env.Cluster("west"), nil, "-o", "json")
	assert.Equal(t, 0, code, rep.notOK())
	for _, w := range []struct{ id, msg string }{
		{"rbac-controller", "no controller (Deployment mcmirror/mcmirror-controller): this cluster links to no other"},
		{"rbac-gateway", "no gateway (Deployment mcmirror/mcmirror-gateway)"},
		{"rbac-dns", "no Deployment kube-system/coredns"},
		{"rbac-link", "ServiceAccount mcmirror/mcmirror-link may do all 4 things"},
		{"link", "links to no other"},
		{"gateway", "no gateway"},
		{"controller-leader", "no controller installed"},
	} {
		r, ok := rep.find(w.id, "")
		if assert.True(t, ok, w.id) {
			assert.Equal(t, "ok", r.Status, "%s: %s", w.id, r.Message)
			assert.Contains(t, r.Message, w.msg, w.id)
		}
	}
	// West has no mirror, so no name to ask a DNS for: said, not failed.
	r, ok := rep.find("dns", "")
	require.True(t, ok)
	assert.Equal(t, "warn", r.Status, r.Message)
	assert.Contains(t, r.Message, "no mirror Service yet")
}

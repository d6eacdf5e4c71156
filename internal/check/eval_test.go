package check

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"maps"
	"math/big"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/peers"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// pki makes certificates as the gateways' fleet has them: a root, an
// intermediate per cluster, a leaf per gateway.
type pki struct {
	t    *testing.T
	root *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	// leafKey is the key of the last leaf chain made.
	leafKey *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	p := &pki{t: t}
	p.root, p.key = p.make(nil, nil, "root", "", now.Add(-time.Hour), now.Add(365*24*time.Hour), true)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.root)
	return p
}

func (p *pki) make(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn, cluster string, from, to time.Time, ca bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(p.t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: from, NotAfter: to}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if cluster != "" {
		tmpl.URIs = []*url.URL{trust.Identity(trust.DefaultTrustDomain, cluster)}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(p.t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(p.t, err)
	return c, key
}

// chain is cluster's gateway chain (leaf, intermediate), valid until to.
func (p *pki) chain(cluster string, to time.Time) []*x509.Certificate {
	inter, ikey := p.make(p.root, p.key, "intermediate "+cluster, cluster, now.Add(-time.Hour), now.Add(90*24*time.Hour), true)
	leaf, key := p.make(inter, ikey, "gateway."+cluster, cluster, now.Add(-time.Hour), to, false)
	p.leafKey = key
	return []*x509.Certificate{leaf, inter}
}

// evalCase is one case of a check that judges one subject: its base facts
// edited, the status wanted, and a part of the message.
type evalCase[F any] struct {
	name   string
	edit   func(*F)
	status Status
	msg    string
}

// runEvalCases judges each case's facts with eval, and wants a fix
// exactly when the result is not ok.
func runEvalCases[F any](t *testing.T, base F, eval func(F) Result, cases []evalCase[F]) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := base
			c.edit(&f)
			r := eval(f)
			assert.Equal(t, c.status, r.Status, r.Message)
			assert.Contains(t, r.Message, c.msg)
			assert.Equal(t, r.Status != OK, r.Fix != "", "a fix exactly when not ok: %+v", r)
		})
	}
}

func TestEvalRBAC(t *testing.T) {
	need := Need{Verb: "list", Resource: "secrets", Namespace: "mcmirror-links"}
	base := RBACFacts{Component: "controller", Installed: true, Why: "Deployment mcmirror/mcmirror-controller",
		Namespace: "mcmirror", ServiceAccount: "mcmirror-controller", AccountFound: true, Fix: "apply it"}
	runEvalCases(t, base, func(f RBACFacts) Result {
		r := evalRBAC(f)
		assert.Equal(t, "rbac-controller", r.ID)
		return r
	}, []evalCase[RBACFacts]{
		{"all allowed", func(f *RBACFacts) { f.Access = []Access{{Need: need, Allowed: true}} }, OK, "may do all 1 thing its code needs"},
		{"denied", func(f *RBACFacts) { f.Access = []Access{{Need: need}} }, Fail, "may not list secrets in mcmirror-links"},
		{"review failed", func(f *RBACFacts) { f.Access = []Access{{Need: need, Err: "forbidden"}} }, Warn, "could not review 1 of 1"},
		{"no account", func(f *RBACFacts) { f.AccountFound = false }, Fail, "which does not exist"},
		{"absent", func(f *RBACFacts) { f.Installed, f.Why = false, "no controller" }, OK, "no controller"},
		{"absent but required", func(f *RBACFacts) { f.Installed, f.Why, f.Required = false, "no controller", "2 link Secrets wait" }, Fail, "2 link Secrets wait"},
		{"absent, wanted", func(f *RBACFacts) { f.Installed, f.Why, f.Wanted = false, "no DNS", "names unanswered" }, Warn, "names unanswered"},
		{"unreadable", func(f *RBACFacts) { f.ReadErr = "forbidden" }, Warn, "could not tell"},
	})
}

func mirror(ns, name string, l map[string]string, ip string) corev1.Service {
	l[labels.ManagedBy] = labels.ManagedByValue
	l[labels.MirroredService] = "true"
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}, Spec: corev1.ServiceSpec{ClusterIP: ip}}
}

func TestPickMirrorQuery(t *testing.T) {
	svcMirror := mirror("default", "web-west", map[string]string{labels.ClusterName: "west", labels.RemoteService: "web", labels.ModeLabel: labels.ModeGateway}, "10.96.0.20")
	headless := mirror("default", "db-west", map[string]string{labels.ClusterName: "west", labels.RemoteService: "db", labels.ModeLabel: labels.ModeGateway}, "None")
	pod := mirror("default", "db-0-west", map[string]string{labels.ClusterName: "west", labels.RemoteService: "db",
		labels.RemoteHostname: "db-0", labels.HeadlessMirrorSvcName: "db-west"}, "10.96.0.30")
	flat := mirror("apps", "api-paris", map[string]string{labels.ClusterName: "paris", labels.RemoteService: "api", labels.ModeLabel: labels.ModeFlat}, "None")
	foreign := svcMirror
	foreign.Name, foreign.Labels = "a-west", map[string]string{labels.MirroredService: "true"}

	q, ok := PickMirrorQuery([]corev1.Service{flat, pod, headless, svcMirror, foreign}, "cluster.local")
	require.True(t, ok)
	assert.Equal(t, DNSQuery{Name: "web-west.default.svc.cluster.local.", Want: netip.MustParseAddr("10.96.0.20"), Mirror: "default/web-west"}, q)

	q, ok = PickMirrorQuery([]corev1.Service{flat, pod, headless}, "example.org.")
	require.True(t, ok)
	assert.Equal(t, "db-0.db-west.default.svc.example.org.", q.Name, "a per-pod mirror's name: <host>.<svc>-<cluster>")
	assert.Equal(t, netip.MustParseAddr("10.96.0.30"), q.Want)

	q, ok = PickMirrorQuery([]corev1.Service{flat, headless}, "cluster.local")
	require.True(t, ok)
	assert.Equal(t, "api-paris.apps.svc.cluster.local.", q.Name)
	assert.False(t, q.Want.IsValid(), "flat mode: the remote pods' addresses, any")

	_, ok = PickMirrorQuery([]corev1.Service{headless, foreign}, "cluster.local")
	assert.False(t, ok)

	v6 := mirror("default", "web6-west", map[string]string{labels.ClusterName: "west", labels.RemoteService: "web6"}, "fd00::20")
	q, _ = PickMirrorQuery([]corev1.Service{v6}, "cluster.local")
	assert.True(t, q.IPv6)
}

func TestEvalDNS(t *testing.T) {
	ip := netip.MustParseAddr("10.96.0.20")
	q := DNSQuery{Name: "web-west.default.svc.cluster.local.", Want: ip, Mirror: "default/web-west"}
	for _, c := range []struct {
		name   string
		f      DNSFacts
		status Status
		msg    string
	}{
		{"answers", DNSFacts{Query: q, HasQuery: true, Server: "s", Rcode: "NOERROR", Answer: []netip.Addr{ip}}, OK, "answers web-west.default.svc.cluster.local with 10.96.0.20"},
		{"no mirror", DNSFacts{}, Warn, "no mirror Service yet"},
		{"cannot list", DNSFacts{MirrorsErr: "forbidden"}, Warn, "could not list"},
		{"unreachable", DNSFacts{Query: q, HasQuery: true, ReachErr: "no ready pod"}, Warn, "could not ask"},
		{"timeout", DNSFacts{Query: q, HasQuery: true, Server: "s", Err: "no answer"}, Fail, "did not answer"},
		{"nxdomain", DNSFacts{Query: q, HasQuery: true, Server: "s", Rcode: "NXDOMAIN"}, Fail, "NXDOMAIN"},
		{"other address", DNSFacts{Query: q, HasQuery: true, Server: "s", Rcode: "NOERROR", Answer: []netip.Addr{netip.MustParseAddr("10.96.0.21")}}, Fail, "not the mirror's ClusterIP"},
		{"flat, any address", DNSFacts{Query: DNSQuery{Name: "a.b.svc.cluster.local."}, HasQuery: true, Server: "s", Rcode: "NOERROR",
			Answer: []netip.Addr{netip.MustParseAddr("10.200.0.5")}}, OK, "10.200.0.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := evalDNS(c.f)
			assert.Equal(t, c.status, r.Status, r.Message)
			assert.Contains(t, r.Message, c.msg)
			assert.Equal(t, r.Status != OK, r.Fix != "")
		})
	}
}

func TestEvalLinks(t *testing.T) {
	good := LinkSecret{Name: "cluster-credentials-west", Cluster: "west", Server: "https://w:6443"}
	for _, c := range []struct {
		name string
		f    LinkFacts
		want []Result // ID, Subject and Status compared; Message by substring
	}{
		{"not configured", LinkFacts{}, []Result{{ID: "link", Status: OK, Message: "links to no other"}}},
		{"healthy", LinkFacts{Configured: true, Namespace: "mcmirror-links", Secrets: []LinkSecret{good}, Peers: []string{"west"}},
			[]Result{{ID: "link", Subject: "west", Status: OK, Message: "https://w:6443 answers"}}},
		{"peer without Secret", LinkFacts{Configured: true, Namespace: "mcmirror-links", Peers: []string{"west"}},
			[]Result{{ID: "link", Subject: "west", Status: Fail, Message: "no usable link Secret for west"}}},
		{"refused", LinkFacts{Configured: true, Namespace: "mcmirror-links", Secrets: []LinkSecret{{Name: "x", Cluster: "west", Refused: "user runs a command", Reason: link.ReasonExec}}},
			[]Result{{ID: "link", Subject: "west", Status: Fail, Message: "refused (exec)"}}},
		{"refused peer is not linked", LinkFacts{Configured: true, Namespace: "n", Peers: []string{"west"},
			Secrets: []LinkSecret{{Name: "x", Cluster: "west", Refused: "bad", Reason: link.ReasonInvalid}}},
			[]Result{{ID: "link", Subject: "west", Status: Fail, Message: "refused"}, {ID: "link", Subject: "west", Status: Fail, Message: "no usable link Secret"}}},
		{"names the local cluster", LinkFacts{Configured: true, Local: "east", Secrets: []LinkSecret{{Name: "x", Cluster: "east"}}},
			[]Result{{ID: "link", Subject: "east", Status: Fail, Message: "this cluster's own name"}}},
		{"token refused", LinkFacts{Configured: true, Secrets: []LinkSecret{{Name: "x", Cluster: "west", ProbeErr: "401", ProbeReason: link.FailureUnauthorized}}},
			[]Result{{ID: "link", Subject: "west", Status: Fail, Message: "unauthorized"}}},
		{"watch denied", LinkFacts{Configured: true, Secrets: []LinkSecret{{Name: "x", Cluster: "west", Denied: []string{"watch services"}}}},
			[]Result{{ID: "link", Subject: "west", Status: Fail, Message: "may not watch services"}}},
		{"two Secrets, one cluster", LinkFacts{Configured: true, Secrets: []LinkSecret{good, {Name: "other", Cluster: "west"}}},
			[]Result{{ID: "link", Subject: "west", Status: OK}, {ID: "link", Subject: "west", Status: Warn, Message: "only one of them is used"}}},
		{"exec not run", LinkFacts{Configured: true, Secrets: []LinkSecret{{Name: "x", Cluster: "west", NotProbed: "runs a command"}}},
			[]Result{{ID: "link", Subject: "west", Status: Warn, Message: "not tried from here"}}},
		{"cannot list", LinkFacts{Configured: true, Namespace: "n", Err: "forbidden"}, []Result{{ID: "link", Status: Warn, Message: "could not list"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := evalLinks(c.f)
			require.Len(t, got, len(c.want), "%+v", got)
			for i, w := range c.want {
				assert.Equal(t, w.ID, got[i].ID)
				assert.Equal(t, w.Subject, got[i].Subject)
				assert.Equal(t, w.Status, got[i].Status, got[i].Message)
				assert.Contains(t, got[i].Message, w.Message)
				assert.Equal(t, got[i].Status != OK, got[i].Fix != "")
			}
		})
	}
}

func TestEvalGateway(t *testing.T) {
	base := GatewayFacts{Installed: true, Config: GatewayConfig{Cluster: "east"}, Service: "mcmirror/mcmirror-gateway-metrics", Ready: true, CertExpiry: now.Add(90 * 24 * time.Hour)}
	runEvalCases(t, base, func(f GatewayFacts) Result { return evalGateway(f, now) }, []evalCase[GatewayFacts]{
		{"ready", func(*GatewayFacts) {}, OK, "expires on 2027-02-24T12:00:00Z, in 90 days"},
		{"absent", func(f *GatewayFacts) { f.Installed, f.NotInstalled = false, "no gateway" }, OK, "no gateway"},
		{"absent but mirrors", func(f *GatewayFacts) {
			f.Installed, f.NotInstalled, f.Required = false, "no gateway", "3 mirror Services"
		}, Fail, "3 mirror Services"},
		{"no pod", func(f *GatewayFacts) { f.Ready, f.Unserved, f.ProxyErr = false, true, "no endpoints available" }, Fail, "no gateway pod serves"},
		{"proxy refused", func(f *GatewayFacts) { f.Ready, f.ProxyErr = false, "forbidden" }, Warn, "could not read"},
		{"not ready", func(f *GatewayFacts) { f.Ready, f.ReadyAnswer = false, "503 shutting down" }, Fail, "503 shutting down"},
		{"expiring", func(f *GatewayFacts) { f.CertExpiry = now.Add(13 * 24 * time.Hour) }, Warn, "in 13 days"},
		{"expired", func(f *GatewayFacts) { f.CertExpiry = now.Add(-time.Hour) }, Fail, "1h0m0s ago"},
		{"expiry unknown", func(f *GatewayFacts) { f.CertErr = "no metric" }, Warn, "expiry is unknown"},
	})
}

func TestEvalPeers(t *testing.T) {
	p := newPKI(t)
	westChain := p.chain("west", now.Add(60*24*time.Hour))
	cfg := GatewayConfig{Cluster: "east", Peers: map[string]string{"west": "203.0.113.10:4143"}, PeerOrder: []string{"west"}, TrustDomain: "mcmirror.dev"}
	alive := map[string]peers.State{"west": {Alive: true, Probed: true, Latency: 3 * time.Millisecond}}
	base := GatewayFacts{Installed: true, Config: cfg, Peers: alive, Roots: p.pool, RootsFrom: "ca.crt"}
	dialOK := map[string]PeerDial{"west": {Addr: "203.0.113.10:4143", Chain: westChain}}
	other := newPKI(t)

	for _, c := range []struct {
		name        string
		edit        func(*GatewayFacts)
		dials       map[string]PeerDial
		reach, cert Status
		msg         string // in one of the two results
	}{
		{"healthy", func(*GatewayFacts) {}, dialOK, OK, OK, "spiffe://mcmirror.dev/cluster/west, expires"},
		{"down for the gateway", func(f *GatewayFacts) {
			f.Peers = map[string]peers.State{"west": {Probed: true, Error: "dial tcp: connection refused"}}
		}, map[string]PeerDial{"west": {Err: "connection refused", Answered: true}}, Fail, Warn, "cannot reach west's ingress"},
		{"refused from here", func(f *GatewayFacts) { f.Peers = nil; f.PeersErr = "forbidden" },
			map[string]PeerDial{"west": {Err: "connect: connection refused", Answered: true}}, Fail, Warn, "refuses from here"},
		{"silent from here, alive for the gateway", func(*GatewayFacts) {}, map[string]PeerDial{"west": {Err: "no answer"}}, OK, Warn, "not reachable from this machine"},
		{"silent everywhere", func(f *GatewayFacts) { f.Peers = nil; f.PeersErr = "x" }, map[string]PeerDial{"west": {Err: "no answer"}}, Warn, Warn, "does not answer from here"},
		{"another cluster's certificate", func(*GatewayFacts) {}, map[string]PeerDial{"west": {Chain: p.chain("paris", now.Add(60*24*time.Hour))}}, OK, Fail, `certificate of cluster "paris", not "west"`},
		{"expired", func(*GatewayFacts) {}, map[string]PeerDial{"west": {Chain: p.chain("west", now.Add(-time.Minute))}}, OK, Fail, "expired on"},
		{"expiring", func(*GatewayFacts) {}, map[string]PeerDial{"west": {Chain: p.chain("west", now.Add(10*24*time.Hour))}}, OK, Warn, "in 10 days"},
		{"another root", func(*GatewayFacts) {}, map[string]PeerDial{"west": {Chain: other.chain("west", now.Add(60*24*time.Hour))}}, OK, Fail, "is not one the gateways accept"},
		{"root unknown", func(f *GatewayFacts) { f.Roots, f.RootsErr = nil, "forbidden" }, dialOK, OK, Warn, "chain not checked: forbidden"},
		{"the gateway refuses it", func(f *GatewayFacts) {
			f.Peers = map[string]peers.State{"west": {Alive: true, Probed: true, Error: "TLS handshake: certificate for west issued by paris's intermediate"}}
		}, dialOK, OK, Fail, "the gateway refuses west's certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := base
			c.edit(&f)
			got := evalPeers(f, c.dials, now)
			require.Len(t, got, 2)
			assert.Equal(t, Result{ID: "peer-reachable", Subject: "west"}, Result{ID: got[0].ID, Subject: got[0].Subject})
			assert.Equal(t, "peer-certificate", got[1].ID)
			assert.Equal(t, c.reach, got[0].Status, got[0].Message)
			assert.Equal(t, c.cert, got[1].Status, got[1].Message)
			assert.Contains(t, got[0].Message+" | "+got[1].Message, c.msg)
			for _, r := range got {
				assert.Equal(t, r.Status != OK, r.Fix != "", "%+v", r)
			}
		})
	}

	// A cluster whose mirrors use the gateway needs a --peer.
	f := base
	f.GatewayMirrors = []string{"paris", "west"}
	got := evalPeers(f, dialOK, now)
	require.Len(t, got, 3)
	assert.Equal(t, Result{ID: "peer-reachable", Subject: "paris", Status: Fail}, Result{ID: got[0].ID, Subject: got[0].Subject, Status: got[0].Status})
	assert.Contains(t, got[0].Message, "no --peer paris")
}

func TestEvalEgress(t *testing.T) {
	ctl := ControllerConfig{EgressPorts: "30000-32767"}
	gw := GatewayConfig{EgressPorts: "30000-32767", Egress: true, IngressAddress: ":4143", MetricsAddress: ":9155"}
	base := EgressFacts{Controller: true, Gateway: true, ControllerCfg: ctl, GatewayCfg: gw,
		Claims: map[string]map[string]int32{"default/web-west": {"80/TCP": 30000}, "default/db-0-west": {"5432/TCP": 30001}}, NodePortsErr: "unknown"}
	// claim gives the edited facts a claim of their own.
	claim := func(port int32) func(*EgressFacts) {
		return func(f *EgressFacts) {
			f.Claims = maps.Clone(f.Claims)
			f.Claims["default/x-west"] = map[string]int32{"80/TCP": port}
		}
	}
	runEvalCases(t, base, evalEgress, []evalCase[EgressFacts]{
		{"agree", func(*EgressFacts) {}, OK, "agree on 30000-32767; 2 ports claimed, none twice; the NodePort range could not be determined"},
		{"differ", func(f *EgressFacts) { f.GatewayCfg.EgressPorts = "31000-32767" }, Fail, "differ"},
		{"gateway believes any port", func(f *EgressFacts) { f.GatewayCfg.EgressPorts = "" }, Warn, "no --egress-ports"},
		{"claimed twice", claim(30000), Fail, "egress port 30000 is claimed by 2 mirrors"},
		{"outside", claim(2000), Warn, "outside"},
		{"own port inside", func(f *EgressFacts) { f.GatewayCfg.MetricsAddress = ":30500" }, Fail, "--metrics-addr port 30500"},
		{"node ports overlap in the pod", func(f *EgressFacts) { f.NodePorts, f.NodePortsFrom = "30000-32767", "default" }, OK, "harmlessly"},
		{"node ports overlap on the host", func(f *EgressFacts) {
			f.NodePorts, f.NodePortsFrom, f.GatewayHostNetwork = "30000-32767", "default", true
		}, Fail, "host network"},
		{"node ports apart", func(f *EgressFacts) { f.NodePorts = "20000-22767" }, OK, "apart from the NodePort range 20000-22767"},
		{"unknown node ports on the host", func(f *EgressFacts) { f.GatewayHostNetwork, f.NodePortsErr = true, "managed" }, Warn, "could not be determined (managed)"},
		{"no controller flag", func(f *EgressFacts) { f.ControllerCfg.EgressPorts = "" }, Fail, "cannot start"},
		{"nothing installed", func(f *EgressFacts) { f.Controller, f.Gateway = false, false }, OK, "no egress ports"},
	})
}

func TestClaimsOf(t *testing.T) {
	m := mirror("default", "web-west", map[string]string{}, "10.96.0.1")
	m.Annotations = map[string]string{labels.EgressPorts: "80/TCP=30000,53/UDP=30001"}
	foreign := m
	foreign.Name, foreign.Labels = "x", map[string]string{}
	assert.Equal(t, map[string]map[string]int32{"default/web-west": {"80/TCP": 30000, "53/UDP": 30001}}, ClaimsOf([]corev1.Service{m, foreign}))
}

func TestEvalLeader(t *testing.T) {
	cfg := ControllerConfig{LeaderElect: true, LeaseNamespace: "mcmirror", LeaseName: "mcmirror-controller"}
	base := LeaseFacts{Controller: true, Cfg: cfg, Replicas: 2, Found: true, Holder: "mcmirror-controller-abc", RenewTime: now.Add(-3 * time.Second), Duration: 15 * time.Second}
	runEvalCases(t, base, func(f LeaseFacts) Result { return evalLeader(f, now) }, []evalCase[LeaseFacts]{
		{"held", func(*LeaseFacts) {}, OK, "mcmirror-controller-abc leads (Lease mcmirror/mcmirror-controller renewed 3s ago, within its 15s)"},
		{"stale", func(f *LeaseFacts) { f.RenewTime = now.Add(-16 * time.Second) }, Fail, "last renewed 16s ago"},
		{"released", func(f *LeaseFacts) { f.Holder = "" }, Fail, "held by nobody"},
		{"never", func(f *LeaseFacts) { f.Found = false }, Fail, "no Lease"},
		{"unreadable", func(f *LeaseFacts) { f.Err = "forbidden" }, Warn, "could not read"},
		{"two without election", func(f *LeaseFacts) { f.Cfg.LeaderElect = false }, Fail, "2 replicas without --leader-elect"},
		{"one without election", func(f *LeaseFacts) { f.Cfg.LeaderElect, f.Replicas = false, 1 }, OK, "one controller replica"},
		{"no controller", func(f *LeaseFacts) { f.Controller = false }, OK, "no controller"},
	})
}

func TestEvalClusterNameAndVersions(t *testing.T) {
	in := Install{
		Controller: Workload{Found: true, Image: "img:1", Args: []string{"controller", "--cluster=east"}},
		Gateway:    Workload{Found: true, Image: "img:1", Args: []string{"gateway", "--cluster", "east"}},
		DNS:        Workload{Found: true, Image: "img:1"},
		Corefile:   ".:53 {\n    mcmirror cluster.local {\n        cluster east\n    }\n}\n", CorefileFrom: "ConfigMap kube-system/coredns-mcmirror",
	}
	assert.Equal(t, OK, evalClusterName(in).Status)
	assert.Equal(t, OK, evalVersions(in).Status)
	assert.Contains(t, evalVersions(in).Message, "controller, gateway, cluster DNS run img:1")

	wrong := in
	wrong.Gateway.Args = []string{"gateway", "--cluster=west"}
	r := evalClusterName(wrong)
	assert.Equal(t, Fail, r.Status)
	assert.Contains(t, r.Message, `the controller's --cluster is "east", but the gateway's --cluster is "west"`)

	old := in
	old.DNS.Image = "img:0"
	assert.Equal(t, Warn, evalVersions(old).Status)

	stock := in
	stock.Corefile, stock.DNS.Image = ".:53 {\n    kubernetes cluster.local\n}\n", "coredns:1.11"
	assert.Equal(t, OK, evalVersions(stock).Status)
	assert.Contains(t, evalVersions(stock).Message, "without mcmirror, not compared")
	assert.Equal(t, OK, evalClusterName(Install{}).Status)
}

// Every check of the report is there, in the documented order, and the
// JSON has the documented fields.
func TestEvaluateAndReport(t *testing.T) {
	f := &Facts{Now: now, Server: "https://127.0.0.1:6443", Version: "Kubernetes v1.32.3",
		RBAC: PlanRBAC(Install{}, 0, 0), Links: LinkFacts{}, Gateway: GatewayFacts{NotInstalled: "no gateway"}}
	rs := Evaluate(f)
	var ids []string
	for _, r := range rs {
		if len(ids) == 0 || ids[len(ids)-1] != r.ID {
			ids = append(ids, r.ID)
		}
	}
	assert.Equal(t, IDs, ids)
	rep := NewReport("", f.Server, rs)
	assert.Equal(t, 0, rep.ExitCode())

	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	assert.ElementsMatch(t, []string{"formatVersion", "cluster", "server", "results", "summary"}, keys(doc))
	assert.Equal(t, float64(1), doc["formatVersion"])
	first := doc["results"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"id", "status", "message"}, keys(first), "subject and fix are left out when empty")
	assert.ElementsMatch(t, []string{"ok", "warn", "fail"}, keys(doc["summary"].(map[string]any)))

	down := &Facts{Server: "https://127.0.0.1:1", APIErr: "unreachable: connection refused"}
	rep = NewReport("", down.Server, Evaluate(down))
	assert.Equal(t, 1, rep.ExitCode())
	buf.Reset()
	require.NoError(t, rep.WriteText(&buf))
	assert.Contains(t, buf.String(), "fail  api  the API server https://127.0.0.1:1 does not answer: unreachable: connection refused\n")
	assert.Contains(t, buf.String(), "\n           fix: check --kubeconfig")
	assert.True(t, strings.HasSuffix(buf.String(), "\n0 ok, 0 warn, 1 fail\n"), buf.String())
}

func keys(m map[string]any) []string { return slices.Collect(maps.Keys(m)) }

// The DNS in import mode needs the controller, writing the flat-mode
// mirrors' endpoints; in direct mode it needs neither.
func TestEvalSource(t *testing.T) {
	const direct = ".:53 {\n    mcmirror cluster.local {\n        cluster east\n        link_secrets mcmirror-links\n    }\n}\n"
	const imports = ".:53 {\n    mcmirror cluster.local {\n        cluster east\n        source import\n    }\n}\n"
	ctl := Workload{Found: true, Args: []string{"controller", "--cluster=east", "--mirror-flat-endpoints"}}
	assert.Equal(t, OK, evalSource(Install{Corefile: direct}).Status)
	assert.Equal(t, OK, evalSource(Install{Corefile: imports, Controller: ctl}).Status)
	r := evalSource(Install{Corefile: imports})
	assert.Equal(t, Fail, r.Status)
	assert.Contains(t, r.Message, "no controller is installed")
	ctl.Args = ctl.Args[:2]
	r = evalSource(Install{Corefile: imports, Controller: ctl})
	assert.Equal(t, Fail, r.Status)
	assert.Contains(t, r.Fix, "--mirror-flat-endpoints")

	// The kubernetes plugin beside mcmirror: unless its labels leave the
	// copies out, it holds every mirrored endpoint a second time.
	ctl.Args = append(ctl.Args, "--mirror-flat-endpoints")
	withKube := func(opts string) string {
		return strings.Replace(imports, "    }\n}\n", "    }\n    kubernetes cluster.local {\n"+opts+"    }\n}\n", 1)
	}
	r = evalSource(Install{Corefile: withKube("        pods insecure\n"), Controller: ctl})
	assert.Equal(t, Warn, r.Status)
	assert.Contains(t, r.Message, "holds each of them twice")
	assert.Contains(t, r.Fix, "labels !mcmirror.dev/flat-endpoints")
	for _, opts := range []string{"        labels !mcmirror.dev/flat-endpoints\n", "        labels app=x ,!mcmirror.dev/flat-endpoints\n", "        labels app=x\n"} {
		assert.Equal(t, OK, evalSource(Install{Corefile: withKube(opts), Controller: ctl}).Status, opts)
	}
	assert.Equal(t, Warn, evalSource(Install{Corefile: withKube("        labels app!=x\n"), Controller: ctl}).Status, "a selector that takes the copies")
}

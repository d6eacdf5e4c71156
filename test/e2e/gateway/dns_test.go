package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// East's cluster DNS reads east's gateway's /peers (`gateway_health`): while
// west's gateway answers its probes, web-global has west's member (the
// mirror web-west) beside east's own web; once west's gateway stops, west's
// member leaves the -global answer within 10 s while web-west itself keeps
// answering; once it is back, so is the member, within 10 s.
func TestGlobalFollowsGatewayHealth(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	ns := namespace(t, "gw-dns")
	east, west := env.Cluster("east"), env.Cluster("west")
	pods := runPods(t, west, "web-a", "web-b")
	f := startFleet(t)
	exportService(t, ns, "web", false, pods)
	m := waitMirror(t, ns, "web-west")
	waitGreet(t, egressAddr(m.EgressPort), wait, "web-west is reached while west's gateway runs")

	// East exports its own web too: its member stays in web-global
	// whatever happens to west, which proves an answer without west's
	// member is an answer, not a failure.
	local, err := east.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: servicePort, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	s := startDNS(t, fmt.Sprintf(`
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster east
        kubeconfig %[1]s
        link west %[2]s
        gateway_health %[3]s/peers
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[1]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, east.Kubeconfig, linkKubeconfig(t), f.east.MetricsURL))

	zone := ns + ".svc.cluster.local."
	global, perCluster := "web-global."+zone, "web-west."+zone
	srv := "_http._tcp." + global
	localTarget := fmt.Sprintf("%d web.%s", servicePort, zone)
	westTarget := fmt.Sprintf("%d web-west.%s", servicePort, zone)
	both := sorted(local.Spec.ClusterIP, m.ClusterIP)

	expect := func(c *assert.CollectT, a, srvTargets []string) {
		r := s.Ask(c, "udp", global, dns.TypeA)
		require.Equal(c, dns.RcodeSuccess, r.Rcode, "%s A", global)
		assert.Equal(c, a, answers(r), "%s A", global)
		r = s.Ask(c, "tcp", srv, dns.TypeSRV)
		require.Equal(c, dns.RcodeSuccess, r.Rcode, "%s SRV", srv)
		assert.Equal(c, srvTargets, answers(r), "%s SRV", srv)
		// The per-cluster name answers whatever the gateway's health.
		assert.Equal(c, []string{m.ClusterIP}, answers(s.Ask(c, "udp", perCluster, dns.TypeA)), "%s A", perCluster)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		expect(c, both, sorted(localTarget, westTarget))
	}, wait, tick, "while west's gateway is up, web-global has east's and west's members")

	f.west.Stop()
	stopped := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// The DNS server is the process under test: it must be serving,
		// and east's gateway must have seen west down, for an answer
		// without west to mean anything.
		done, _ := s.Process.Exited()
		require.False(c, done, "coredns-mc exited")
		peers, err := f.east.Peers()
		require.NoError(c, err)
		assert.False(c, peers["west"].Alive, "east's /peers: west")
		expect(c, []string{local.Spec.ClusterIP}, []string{localTarget})
	}, healthBound, tick, "within %v of west's gateway stopping, west's member leaves web-global; web-west still answers", healthBound)
	t.Logf("west's member left web-global %v after west's gateway stopped", time.Since(stopped).Round(time.Millisecond))

	restarted := time.Now()
	f.west.Start(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		expect(c, both, sorted(localTarget, westTarget))
	}, healthBound, tick, "within %v of west's gateway starting again, west's member is back in web-global", healthBound)
	t.Logf("west's member back in web-global %v after west's gateway started again", time.Since(restarted).Round(time.Millisecond))
	requireRunning(t, s.Process)
}

// startDNS runs coredns-mc with corefile ({READY} and {METRICS} replaced by
// free ports) and waits until it answers, as harness.StartDNS does, but
// fails at once, with its log, if it exits: a Corefile option it does not
// know ends it at start.
func startDNS(t *testing.T, corefile string) *harness.DNSServer {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	port, ready, metrics := harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)
	for k, v := range map[string]int{"{READY}": ready, "{METRICS}": metrics} {
		corefile = strings.ReplaceAll(corefile, k, strconv.Itoa(v))
	}
	path := filepath.Join(t.TempDir(), "Corefile")
	require.NoError(t, os.WriteFile(path, []byte(corefile), 0o644))
	s := &harness.DNSServer{
		Addr:       net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
	}
	s.Process = env.StartProcess(t, "east/coredns-mc", nil, bin, "-conf", path, "-dns.port", strconv.Itoa(port))
	deadline := time.Now().Add(wait)
	for {
		if done, err := s.Process.Exited(); done {
			t.Fatalf("coredns-mc exited at start: %v\n%s", err, s.Process.Tail(20))
		}
		if dnsReady(ready, s.Addr) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("coredns-mc not ready within %v\n%s", wait, s.Process.Tail(20))
		}
		time.Sleep(tick)
	}
}

// dnsReady: the ready plugin says so and a query is answered (the
// listeners open last).
func dnsReady(readyPort int, addr string) bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort))
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	m := new(dns.Msg)
	m.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, addr)
	return err == nil && r.Rcode == dns.RcodeSuccess
}

// answers returns the A addresses and SRV "port target"s of a reply, sorted.
func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string { slices.Sort(s); return s }

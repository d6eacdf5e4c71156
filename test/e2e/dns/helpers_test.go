package dns_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
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
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// statefulSet is a StatefulSet nginx-set behind headless nginx-svc with port
// http 80, labelled with export (none when empty).
func statefulSet(ns string, replicas int, export string) string {
	lbl := "{}"
	if export != "" {
		lbl = fmt.Sprintf("{%s: %q}", labels.Exported, export)
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata: {name: nginx-svc, namespace: %[1]s, labels: %[3]s}
spec:
  clusterIP: None
  selector: {app: nginx}
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nginx-set, namespace: %[1]s}
spec:
  serviceName: nginx-svc
  replicas: %[2]d
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      nodeName: %[4]s
      containers: [{name: nginx, image: nginx, ports: [{name: http, containerPort: 80}]}]
`, ns, replicas, lbl, harness.NodeName)
}

// setExport labels (or, with "", unlabels) a Service as exported.
func setExport(t *testing.T, c *harness.Cluster, ns, svc, export string) {
	t.Helper()
	ctx := context.Background()
	s, err := c.Client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	require.NoError(t, err)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if export == "" {
		delete(s.Labels, labels.Exported)
	} else {
		s.Labels[labels.Exported] = export
	}
	_, err = c.Client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// scale sets the replicas of StatefulSet nginx-set.
func scale(t *testing.T, c *harness.Cluster, ns string, replicas int) {
	t.Helper()
	ctx := context.Background()
	sc, err := c.Client.AppsV1().StatefulSets(ns).GetScale(ctx, "nginx-set", metav1.GetOptions{})
	require.NoError(t, err)
	sc.Spec.Replicas = int32(replicas)
	_, err = c.Client.AppsV1().StatefulSets(ns).UpdateScale(ctx, "nginx-set", sc, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// endpoints returns hostname → IP of the ready endpoints of a Service.
func endpoints(ctx context.Context, c *harness.Cluster, ns, svc string) (map[string]string, error) {
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Hostname != nil && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out[*ep.Hostname] = ep.Addresses[0]
			}
		}
	}
	return out, nil
}

// waitEndpoints waits until the Service has exactly n ready named endpoints
// and returns them.
func waitEndpoints(t *testing.T, c *harness.Cluster, ns, svc string, n int) map[string]string {
	t.Helper()
	var eps map[string]string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		eps, err = endpoints(context.Background(), c, ns, svc)
		require.NoError(ct, err)
		assert.Len(ct, eps, n)
	}, 60*time.Second, 50*time.Millisecond, "%s: %s/%s with %d ready endpoints", c.Name, ns, svc, n)
	return eps
}

// mirrorHeadless stands in for a mirror controller: it makes in local what
// Linkerd's service mirror makes for a headless export of remote: a headless
// Service <svc>-<cluster> and, per named endpoint, a ClusterIP Service
// <host>-<cluster>; per-pod mirrors of endpoints that are gone are deleted.
// It returns host → mirror ClusterIP.
func mirrorHeadless(t *testing.T, local, remote *harness.Cluster, ns, svc string) map[string]string {
	t.Helper()
	ctx := context.Background()
	eps, err := endpoints(ctx, remote, ns, svc)
	require.NoError(t, err)
	mirror := svc + "-" + remote.Name
	base := map[string]string{labels.MirroredService: labels.MirroredServiceValue, labels.ClusterName: remote.Name}
	_, err = local.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	ports := []corev1.ServicePort{{Name: "http", Port: 80}}
	ensureService(t, local, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: mirror, Namespace: ns, Labels: base},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: ports},
	})
	ips := map[string]string{}
	for host := range eps {
		l := map[string]string{labels.HeadlessMirrorSvcName: mirror}
		for k, v := range base {
			l[k] = v
		}
		s := ensureService(t, local, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: host + "-" + remote.Name, Namespace: ns, Labels: l},
			Spec:       corev1.ServiceSpec{Ports: ports},
		})
		ips[host] = s.Spec.ClusterIP
	}
	list, err := local.Client.CoreV1().Services(ns).List(ctx,
		metav1.ListOptions{LabelSelector: labels.HeadlessMirrorSvcName + "=" + mirror})
	require.NoError(t, err)
	for _, s := range list.Items {
		if host := strings.TrimSuffix(s.Name, "-"+remote.Name); eps[host] == "" {
			require.NoError(t, local.Client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}))
		}
	}
	return ips
}

func ensureService(t *testing.T, c *harness.Cluster, s *corev1.Service) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	got, err := c.Client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = c.Client.CoreV1().Services(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	}
	require.NoError(t, err)
	return got
}

// server is a running coredns-mc.
type server struct {
	addr    string // DNS, UDP and TCP
	ready   string // the ready plugin's URL
	metrics string // the prometheus plugin's URL
	proc    *harness.Process
}

// corefileFor returns a cluster DNS Corefile for the local cluster with
// mcmirror before kubernetes; block is the body of the mcmirror block.
func corefileFor(local *harness.Cluster, block string) string {
	return fmt.Sprintf(`
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster %[1]s
        kubeconfig %[2]s
%[3]s
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, local.Name, local.Kubeconfig, block)
}

// startServer runs coredns-mc with corefile ({READY} is replaced by a free
// port) and waits until its ready plugin says every plugin is ready.
func startServer(t *testing.T, corefile string) *server {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	port, readyPort, metricsPort := freePort(t), freePort(t), freePort(t)
	corefile = strings.NewReplacer("{READY}", strconv.Itoa(readyPort), "{METRICS}", strconv.Itoa(metricsPort)).Replace(corefile)
	path := filepath.Join(t.TempDir(), "Corefile")
	require.NoError(t, os.WriteFile(path, []byte(corefile), 0o644))
	s := &server{
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		ready:   fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort),
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
	}
	s.proc = env.StartProcess(t, "east/coredns-mc", nil, bin, "-conf", path, "-dns.port", strconv.Itoa(port))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := s.proc.Exited()
		require.False(c, done, "coredns-mc exited: %v\n%s", err, s.proc.Tail(20))
		resp, err := http.Get(s.ready)
		require.NoError(c, err)
		resp.Body.Close()
		require.Equal(c, http.StatusOK, resp.StatusCode)
		// CoreDNS's ready plugin listens a moment before it knows which
		// plugins to ask, and the DNS listeners open last: only an answer
		// proves the server is up.
		r := s.ask(c, "udp", "kubernetes.default.svc.cluster.local.", dns.TypeA)
		assert.Equal(c, dns.RcodeSuccess, r.Rcode)
	}, 60*time.Second, 50*time.Millisecond, "coredns-mc ready")
	return s
}

// metric returns the value of the sample of the server's metrics whose name
// and labels are exactly series, e.g. `coredns_mcmirror_link_synced{cluster="west"}`,
// and whether it was there.
func (s *server) metric(t *testing.T, series string) (string, bool) {
	t.Helper()
	resp, err := http.Get(s.metrics)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// freePort returns a port free for both UDP and TCP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// ask sends one query over network ("udp" or "tcp") and returns the reply.
// t may be a *testing.T or, inside EventuallyWithT, the collector.
func (s *server) ask(t require.TestingT, network, name string, qtype uint16) *dns.Msg {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, s.addr)
	require.NoError(t, err, "%s %s", name, dns.TypeToString[qtype])
	return r
}

// answers returns the A/AAAA addresses, SRV targets or PTR names of a reply,
// sorted.
func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		case *dns.PTR:
			out = append(out, rr.Ptr)
		}
	}
	slices.Sort(out)
	return out
}

// glue returns the A records of the additional section as name → address.
func glue(r *dns.Msg) map[string]string {
	out := map[string]string{}
	for _, rr := range r.Extra {
		if a, ok := rr.(*dns.A); ok {
			out[a.Hdr.Name] = a.A.String()
		}
	}
	return out
}

// dig runs the real dig against the server and returns its +short output
// lines, sorted.
func (s *server) dig(t testing.TB, args ...string) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	argv := append([]string{"@" + host, "-p", port, "+short", "+time=5", "+tries=1"}, args...)
	out, err := exec.Command("dig", argv...).CombinedOutput()
	require.NoError(t, err, "dig %s: %s", strings.Join(argv, " "), out)
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(args) > 0 && slices.Contains(args, "SRV") {
		lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	slices.Sort(lines)
	return lines
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	require.NoError(t, err)
	return a
}

// values returns the values of m, sorted.
func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/bench/internal/kube"
	"github.com/mcmirror/mcmirror/bench/internal/stats"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// ipProp is the address of the propagation endpoint after change k in
// cluster c.
func ipProp(c, k int) string { return fmt.Sprintf("10.%d.%d.%d", 200+c, 200+k/250, 1+k%250) }

// loadProp creates Service prop, one endpoint h0, in ns ten of every remote
// cluster; exported with the ten set, so the A10 server answers it.
func loadProp(env *harness.Env) error {
	cr := newCreator(env.Clusters(), 4)
	for c := range 10 {
		cr.headless(fmt.Sprintf("c%d", c), nsProp, "prop", exportLabels("ten"),
			[]kube.Endpoint{{Host: "h0", IP: ipProp(c, 0)}})
	}
	return cr.wait()
}

// latencies is a set of measured delays.
type latencies struct {
	d      []time.Duration
	failed int
	api    []time.Duration // how long the API write itself took
}

func (l *latencies) pct(p float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	return stats.Rank(slices.Sorted(slices.Values(l.d)), p)
}

func apiMedian(l *latencies) time.Duration {
	if len(l.api) == 0 {
		return 0
	}
	return slices.Sorted(slices.Values(l.api))[len(l.api)/2]
}

// pollFor asks for name every interval until ok accepts the answer or
// limit passes; it returns when the accepted answer arrived.
func pollFor(addr, name string, interval, limit time.Duration, ok func([]string, int) bool) (time.Time, bool) {
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		got, rcode, err := askA(c, addr, name)
		now := time.Now()
		if err == nil && ok(got, rcode) {
			return now, true
		}
		time.Sleep(interval)
	}
	return time.Time{}, false
}

// propagation changes the address of endpoint h0 of Service prop, in the
// remote clusters in turn, n times, and measures the time from the API
// request to the first correct answer of s (polled every millisecond).
func propagation(env *harness.Env, s *server, n int) (*latencies, error) {
	ctx := context.Background()
	clients := make([]kubernetes.Interface, 10)
	current := make([]*discoveryv1.EndpointSlice, 10)
	for c := range 10 {
		clients[c] = fastClient(env.Cluster(fmt.Sprintf("c%d", c)))
		sl, err := clients[c].DiscoveryV1().EndpointSlices(nsProp).Get(ctx, "prop-0", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		current[c] = sl
	}
	l := &latencies{}
	for k := 1; k <= n; k++ {
		c := k % 10
		ip := ipProp(c, k)
		name := fmt.Sprintf("h0.prop-c%d.%s.%s", c, nsProp, zone)
		sl := current[c].DeepCopy()
		sl.Endpoints[0].Addresses = []string{ip}
		t0 := time.Now()
		updated, err := clients[c].DiscoveryV1().EndpointSlices(nsProp).Update(ctx, sl, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", k, err)
		}
		l.api = append(l.api, time.Since(t0))
		current[c] = updated
		at, ok := pollFor(s.addr(), name, time.Millisecond, 10*time.Second, func(got []string, rcode int) bool {
			return rcode == dns.RcodeSuccess && slices.Equal(got, []string{ip})
		})
		if !ok {
			l.failed++
			logf("  change %d: %s never answered %s", k, name, ip)
			continue
		}
		l.d = append(l.d, at.Sub(t0))
		time.Sleep(10 * time.Millisecond)
	}
	return l, nil
}

// newExports creates n ClusterIP Services exported in gateway mode, in the
// remote clusters in turn, and measures the time from the create request to
// the first answer of s that is the ClusterIP of the mirror the controller
// made in the local cluster.
func newExports(env *harness.Env, s *server, n int) (*latencies, error) {
	ctx := context.Background()
	east := env.Cluster("east")
	local := fastClient(east)
	clients := make([]kubernetes.Interface, 10)
	for c := range 10 {
		clients[c] = fastClient(env.Cluster(fmt.Sprintf("c%d", c)))
	}
	l := &latencies{}
	for k := range n {
		c := k % 10
		svc := fmt.Sprintf("x%d", k)
		mirror := fmt.Sprintf("%s-c%d", svc, c)
		name := fmt.Sprintf("%s.%s.%s", mirror, nsGW, zone)
		var answer string
		t0 := time.Now()
		_, err := clients[c].CoreV1().Services(nsGW).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: nsGW,
				Labels: map[string]string{labels.Exported: labels.ExportGateway, setLabel: "gw"}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("export %d: %w", k, err)
		}
		l.api = append(l.api, time.Since(t0))
		at, ok := pollFor(s.addr(), name, time.Millisecond, 15*time.Second, func(got []string, rcode int) bool {
			if rcode != dns.RcodeSuccess || len(got) != 1 || !inCIDR(east.ServiceCIDR, got[0]) {
				return false
			}
			answer = got[0]
			return true
		})
		if !ok {
			l.failed++
			logf("  export %d: %s did not resolve to a local ClusterIP", k, name)
			if k < 3 && l.failed == k+1 {
				return l, fmt.Errorf("the first %d new exports never resolved", k+1)
			}
			continue
		}
		// The answer must be the mirror's own ClusterIP.
		m, err := local.CoreV1().Services(nsGW).Get(ctx, mirror, metav1.GetOptions{})
		if err != nil || m.Spec.ClusterIP != answer {
			l.failed++
			logf("  export %d: %s answered %s, mirror says %v (%v)", k, name, answer, clusterIP(m), err)
			continue
		}
		l.d = append(l.d, at.Sub(t0))
	}
	return l, nil
}

func clusterIP(s *corev1.Service) string {
	if s == nil {
		return ""
	}
	return s.Spec.ClusterIP
}

package check

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// CollectMember gathers what a check of a fleet needs of one cluster as a
// source: the link Secrets, each tried with its credentials as Collect
// tries them; the gateway's view of its peers; and what each replica of
// the cluster DNS says of its links. Each call is bounded by the timeout.
func CollectMember(ctx context.Context, o Options) *MemberFacts {
	c := &collector{o: o, client: o.Client}
	m := &MemberFacts{Server: o.Config.Host}
	if _, err := c.serverVersion(ctx); err != nil {
		m.APIErr, m.Now = describe(err), o.now()
		return m
	}
	in := c.install(ctx)
	ctl, gw, dns := ParseController(in.Controller.Args), ParseGateway(in.Gateway.Args), ParseCorefile(in.Corefile)
	m.Links = c.linkSecrets(ctx, in, ctl, dns, gw)
	m.Gateway = GatewayFacts{Installed: in.Gateway.Found, Config: gw, Service: Namespace + "/" + GatewayMetricsService}

	run, wait := c.sideBySide(ctx)
	policy := linkPolicy(in, ctl, dns)
	for i := range m.Links.Secrets {
		run(func(ctx context.Context) { c.probeLink(ctx, &m.Links.Secrets[i], &c.secrets[i], policy) })
	}
	if m.Gateway.Installed {
		run(func(ctx context.Context) { c.gateway(ctx, &m.Gateway) })
	}
	m.DNS = DNSLinks{Deployment: in.DNS.Namespace + "/" + in.DNS.Name, Unread: dnsUnread(in, dns)}
	if m.DNS.Unread == "" {
		c.dnsReplicas(ctx, &m.DNS, dns.Metrics, run)
	}
	wait()
	m.Now = o.now()
	return m
}

// dnsUnread says why the cluster DNS's replicas cannot be asked for their
// links, or "".
func dnsUnread(in Install, dns DNSConfig) string {
	ref := in.DNS.Namespace + "/" + in.DNS.Name
	switch {
	case in.DNS.Err != "":
		return fmt.Sprintf("could not read Deployment %s: %s", ref, in.DNS.Err)
	case !in.DNS.Found:
		return fmt.Sprintf("no Deployment %s, the cluster DNS", ref)
	case in.CorefileErr != "":
		return fmt.Sprintf("the Corefile of %s: %s", ref, in.CorefileErr)
	case !dns.Mcmirror:
		return fmt.Sprintf("the Corefile of %s (%s) has no mcmirror block", ref, in.CorefileFrom)
	case dns.Import:
		return fmt.Sprintf("the Corefile of %s (%s) reads the linked clusters from the controller's mirrors (source import): the controller's leader watches the links (its mcmirror_controller_link_synced), the DNS replicas none", ref, in.CorefileFrom)
	case dns.Metrics == "":
		return fmt.Sprintf("the Corefile of %s (%s) runs no prometheus plugin, where the replicas' link states are", ref, in.CorefileFrom)
	}
	host, _, err := net.SplitHostPort(dns.Metrics)
	if err != nil {
		return fmt.Sprintf("the Corefile's prometheus address %q: %v", dns.Metrics, err)
	}
	if a, err := netip.ParseAddr(host); host == "localhost" || err == nil && a.IsLoopback() {
		return fmt.Sprintf("the Corefile's prometheus plugin listens on %s: not on the pods' address, where the API server's proxy reaches it", dns.Metrics)
	}
	return ""
}

// dnsReplicas lists the running pods of the cluster DNS and reads each
// one's /metrics through the API server's proxy, with run.
func (c *collector) dnsReplicas(ctx context.Context, d *DNSLinks, metrics string, run func(func(context.Context))) {
	_, port, _ := net.SplitHostPort(metrics)
	ns := namespaceOf(d.Deployment)
	lctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	list, err := c.client.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: DNSPodSelector})
	if err != nil {
		d.PodsErr = describe(err)
		return
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
		return p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil
	})
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	d.Replicas = make([]DNSReplica, len(pods))
	for i, p := range pods {
		d.Replicas[i].Pod = ns + "/" + p.Name
		run(func(ctx context.Context) {
			d.Replicas[i].Links, d.Replicas[i].Err = c.podMetrics(ctx, ns, p.Name, port)
		})
	}
}

// podMetrics reads the link states of one pod's /metrics, through the API
// server's proxy to the pod.
func (c *collector) podMetrics(ctx context.Context, ns, pod, port string) (map[string]ReplicaLink, string) {
	res := c.client.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").SubResource("proxy").
		Name(utilnet.JoinSchemeNamePort("http", pod, port)).Suffix("/metrics").Do(ctx)
	body, err := res.Raw()
	if err != nil {
		if msg, _ := apiServerError(body, err); msg != "" {
			return nil, "/metrics: " + msg
		}
		return nil, "/metrics: " + firstLine(body, err)
	}
	links, err := ParseLinkMetrics(body)
	if err != nil {
		return nil, "/metrics: " + err.Error()
	}
	return links, ""
}

// The series of a DNS replica's /metrics that say how each link is.
const (
	metricLinkSynced    = "coredns_mcmirror_link_synced"
	metricLinkUp        = "coredns_mcmirror_link_up"
	metricLinkWithdrawn = "coredns_mcmirror_link_withdrawn"
	metricLinkLastSync  = "coredns_mcmirror_link_last_sync_timestamp_seconds"
)

// ParseLinkMetrics reads the link states of a DNS replica's /metrics (the
// Prometheus text format), by cluster: a cluster is there when it has a
// link_synced series.
func ParseLinkMetrics(body []byte) (map[string]ReplicaLink, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if fams[metricLinkSynced] == nil {
		return nil, fmt.Errorf("no %s: is it coredns-mc with the mcmirror plugin?", metricLinkSynced)
	}
	out := map[string]ReplicaLink{}
	each := func(name string, f func(l *ReplicaLink, v float64)) {
		fam := fams[name]
		if fam == nil {
			return
		}
		for _, m := range fam.GetMetric() {
			var cluster string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "cluster" {
					cluster = lp.GetValue()
				}
			}
			l, ok := out[cluster]
			if !ok && name != metricLinkSynced {
				continue
			}
			f(&l, m.GetGauge().GetValue())
			out[cluster] = l
		}
	}
	each(metricLinkSynced, func(l *ReplicaLink, v float64) { l.Synced = v == 1 })
	each(metricLinkUp, func(l *ReplicaLink, v float64) { l.Up = v == 1 })
	each(metricLinkWithdrawn, func(l *ReplicaLink, v float64) { l.Withdrawn = v == 1 })
	each(metricLinkLastSync, func(l *ReplicaLink, v float64) {
		if v > 0 {
			l.LastSeen = time.Unix(0, int64(v*1e9))
		}
	})
	return out, nil
}

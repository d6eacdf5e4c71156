package check

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
)

// DNSQuery is the name check asks the cluster DNS for, and what it must
// answer.
type DNSQuery struct {
	// Name is the fully qualified name, with the final dot.
	Name string
	// IPv6 asks AAAA rather than A.
	IPv6 bool
	// Want is the address the answer must hold; the zero Addr accepts any
	// (a flat-mode mirror answers the remote pods' addresses).
	Want netip.Addr
	// Mirror is the mirror Service the name is of, namespace/name.
	Mirror string
}

// PickMirrorQuery chooses, among the controller's mirror Services, the one
// whose name the cluster DNS is asked for: a gateway-mode Service mirror
// (its ClusterIP is the answer), else a per-pod mirror (the name
// <host>.<svc>-<cluster>, answered by mcmirror alone), else a flat-mode
// mirror (any address). Within a kind the first by namespace and name, so
// that two runs ask the same. ok is false when there is no mirror.
func PickMirrorQuery(mirrors []corev1.Service, domain string) (q DNSQuery, ok bool) {
	sorted := slices.Clone(mirrors)
	slices.SortFunc(sorted, func(a, b corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	hasIP := func(s corev1.Service) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s.Spec.ClusterIP)
		return a, err == nil
	}
	var perPod, flat *corev1.Service
	for i := range sorted {
		s := &sorted[i]
		if s.Labels[labels.ManagedBy] != labels.ManagedByValue || s.DeletionTimestamp != nil {
			continue
		}
		ip, routable := hasIP(*s)
		switch {
		case s.Labels[labels.RemoteHostname] != "" && s.Labels[labels.HeadlessMirrorSvcName] != "" && routable:
			perPod = cmp.Or(perPod, s)
		case s.Labels[labels.ModeLabel] == labels.ModeFlat:
			flat = cmp.Or(flat, s)
		case routable && s.Labels[labels.RemoteHostname] == "":
			return DNSQuery{Name: fqdn(s.Name, s.Namespace, domain), IPv6: ip.Is6(), Want: ip, Mirror: s.Namespace + "/" + s.Name}, true
		}
	}
	if perPod != nil {
		ip, _ := hasIP(*perPod)
		name := perPod.Labels[labels.RemoteHostname] + "." + fqdn(perPod.Labels[labels.HeadlessMirrorSvcName], perPod.Namespace, domain)
		return DNSQuery{Name: name, IPv6: ip.Is6(), Want: ip, Mirror: perPod.Namespace + "/" + perPod.Name}, true
	}
	if flat != nil {
		return DNSQuery{Name: fqdn(flat.Name, flat.Namespace, domain), Mirror: flat.Namespace + "/" + flat.Name}, true
	}
	return DNSQuery{}, false
}

func fqdn(svc, ns, domain string) string {
	return svc + "." + ns + ".svc." + strings.TrimSuffix(domain, ".") + "."
}

// DNSFacts is what check found when it asked the cluster DNS.
type DNSFacts struct {
	// MirrorsErr is why the mirror Services could not be listed.
	MirrorsErr string
	// Query is what was asked; HasQuery is false when there is no mirror.
	Query    DNSQuery
	HasQuery bool
	// Server says where the question went: "10.0.0.10:53 (--dns-server)"
	// or "pod kube-system/coredns-abc port 53, port-forwarded".
	Server string
	// ReachErr is why no server could be asked (no pod to forward to, a
	// refused port-forward).
	ReachErr string
	// Rcode of the answer, Answer its addresses, Err why none came.
	Rcode  string
	Answer []netip.Addr
	Err    string
}

func evalDNS(f DNSFacts) Result {
	r := Result{ID: "dns"}
	switch {
	case f.MirrorsErr != "":
		return r.judged(Warn, "could not list the mirror Services: "+f.MirrorsErr, "run check as a user who may list services in every namespace")
	case !f.HasQuery:
		return r.judged(Warn, "no mirror Service yet, so no mirror name to ask the cluster DNS for",
			"link a cluster that exports a Service (coredns-mc link), then run check again")
	case f.ReachErr != "":
		return r.judged(Warn, fmt.Sprintf("could not ask the cluster DNS for %s: %s", f.Query.Name, f.ReachErr),
			"give --dns-server HOST:PORT of a cluster DNS address this machine reaches, or allow port-forward to the kube-dns pods (create pods/portforward in kube-system)")
	case f.Err != "":
		return r.judged(Fail, fmt.Sprintf("%s did not answer %s: %s", f.Server, f.Query.Name, f.Err),
			"kubectl -n kube-system get pods -l k8s-app=kube-dns; kubectl -n kube-system logs deploy/coredns")
	case f.Rcode != "NOERROR" || len(f.Answer) == 0:
		return r.judged(Fail, fmt.Sprintf("%s answered %s with %s and %d addresses for mirror %s", f.Server, f.Query.Name, f.Rcode, len(f.Answer), f.Query.Mirror),
			"kubectl -n kube-system logs deploy/coredns | grep -i mcmirror (is the Corefile's mcmirror block loaded, its links synced?)")
	case f.Query.Want.IsValid() && !slices.Contains(f.Answer, f.Query.Want):
		return r.judged(Fail, fmt.Sprintf("%s answered %s with %s, not the mirror's ClusterIP %s", f.Server, f.Query.Name, addrs(f.Answer), f.Query.Want),
			"kubectl -n kube-system rollout restart deployment coredns, and check that the Corefile's cluster matches the controller's --cluster")
	}
	return r.judged(OK, fmt.Sprintf("%s answers %s with %s", f.Server, strings.TrimSuffix(f.Query.Name, "."), addrs(f.Answer)), "")
}

func addrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

package check

import (
	"fmt"
	"strings"
)

// Need is one thing a component's code does with its cluster's API, and so
// one permission its ServiceAccount must hold. The lists below are what
// the code does (controller/, gateway/, plugin/mcmirror/, internal/link/),
// which deploy/controller.yaml, gateway.yaml, coredns.yaml and
// remote-link.yaml grant; rbac_test.go keeps them equal.
type Need struct {
	Verb, Group, Resource string
	// Namespace is empty for every namespace (cluster-wide).
	Namespace string
	// Name narrows the need to one object.
	Name string
}

func (n Need) String() string {
	r := n.Resource
	if n.Group != "" {
		r += "." + n.Group
	}
	if n.Name != "" {
		r += " " + n.Name
	}
	if n.Namespace != "" {
		return fmt.Sprintf("%s %s in %s", n.Verb, r, n.Namespace)
	}
	return n.Verb + " " + r
}

func needs(group, resource, ns string, verbs ...string) []Need {
	out := make([]Need, len(verbs))
	for i, v := range verbs {
		out[i] = Need{Verb: v, Group: group, Resource: resource, Namespace: ns}
	}
	return out
}

// ControllerNeeds is what the controller configured by c does, running in
// namespace ns.
func ControllerNeeds(c ControllerConfig) []Need {
	out := needs("", "services", "", "list", "watch", "create", "update", "patch", "delete")
	out = append(out, needs("discovery.k8s.io", "endpointslices", "", "get", "list", "watch", "create", "update", "delete")...)
	out = append(out, needs("", "namespaces", "", "list", "watch")...)
	// The Multi-Cluster Services API (controller/mcsapi.go), and the
	// cluster ID read at start.
	out = append(out, needs("multicluster.x-k8s.io", "serviceexports", "", "list", "watch")...)
	out = append(out, needs("multicluster.x-k8s.io", "serviceexports/status", "", "update")...)
	out = append(out, needs("multicluster.x-k8s.io", "serviceimports", "", "list", "watch", "create", "update", "patch", "delete")...)
	out = append(out, needs("multicluster.x-k8s.io", "serviceimports/status", "", "update")...)
	out = append(out, Need{Verb: "get", Group: "about.k8s.io", Resource: "clusterproperties", Name: "cluster.clusterset.k8s.io"})
	if c.CreateNamespaces {
		out = append(out, Need{Verb: "create", Resource: "namespaces"})
	}
	out = append(out, needs("", "events", "", "create", "patch")...)
	if c.LeaderElect {
		out = append(out, Need{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: c.LeaseNamespace})
		for _, v := range []string{"get", "update"} {
			out = append(out, Need{Verb: v, Group: "coordination.k8s.io", Resource: "leases", Namespace: c.LeaseNamespace, Name: c.LeaseName})
		}
	}
	if ns := c.LinkSecretsNamespace(); ns != "" {
		out = append(out, needs("", "secrets", ns, "list", "watch")...)
	}
	return out
}

// GatewayNeeds is what the gateway does; events is the namespace of its
// Pod when it records Events ($POD_NAME set), empty otherwise.
func GatewayNeeds(events string) []Need {
	out := LinkNeeds()
	if events != "" {
		out = append(out, needs("", "events", events, "create", "patch")...)
	}
	return out
}

// DNSNeeds is what the cluster DNS with mcmirror configured by d does
// (the kubernetes plugin beside it reads the same, and Namespaces).
func DNSNeeds(d DNSConfig) []Need {
	out := append(LinkNeeds(), needs("", "namespaces", "", "list", "watch")...)
	if d.LinkNamespace != "" {
		out = append(out, needs("", "secrets", d.LinkNamespace, "list", "watch")...)
	}
	return out
}

// LinkNeeds is what a linking cluster's controller and DNS do with the
// token of mcmirror/mcmirror-link.
func LinkNeeds() []Need {
	return append(needs("", "services", "", "list", "watch"), needs("discovery.k8s.io", "endpointslices", "", "list", "watch")...)
}

// Access is what the API server answered for one Need of a ServiceAccount.
type Access struct {
	Need    Need
	Allowed bool
	// Err is why the review could not be made, if so.
	Err string
}

// RBACFacts is what check found of one component's ServiceAccount.
type RBACFacts struct {
	// Component is "controller", "gateway", "dns" or "link".
	Component string
	// Installed says whether the component is there; Why says how check
	// knows, or why it is not counted as installed.
	Installed bool
	Why       string
	// Namespace and ServiceAccount it runs as.
	Namespace, ServiceAccount string
	// AccountFound is whether that ServiceAccount exists; AccountErr why
	// that could not be read.
	AccountFound bool
	AccountErr   string
	// Access has one entry per Need.
	Access []Access
	// Required, when not installed, says what needs the component: a
	// failure then. Wanted says what would use it: a warning.
	Required, Wanted string
	// ReadErr is why check could not tell whether it is installed.
	ReadErr string
	// Fix is the fix line for missing permissions.
	Fix string
}

// evalRBAC turns one component's facts into its result.
func evalRBAC(f RBACFacts) Result {
	r := Result{ID: "rbac-" + f.Component}
	sa := f.Namespace + "/" + f.ServiceAccount
	switch {
	case f.ReadErr != "":
		return r.judged(Warn, "could not tell whether it is installed: "+f.ReadErr,
			"run check as a user who may read deployments, configmaps and serviceaccounts (cluster-admin)")
	case !f.Installed && f.Wanted != "":
		return r.judged(Warn, f.Why+"; "+f.Wanted, f.Fix)
	case !f.Installed && f.Required != "":
		return r.judged(Fail, f.Why+", but "+f.Required, f.Fix)
	case !f.Installed:
		return r.judged(OK, f.Why, "")
	case f.AccountErr != "":
		return r.judged(Warn, fmt.Sprintf("could not read ServiceAccount %s: %s", sa, f.AccountErr),
			"run check as a user who may get serviceaccounts and create subjectaccessreviews (cluster-admin)")
	case !f.AccountFound:
		return r.judged(Fail, fmt.Sprintf("%s runs as ServiceAccount %s, which does not exist: its pods cannot start", f.Why, sa), f.Fix)
	}
	var denied, unknown []string
	for _, a := range f.Access {
		switch {
		case a.Err != "":
			unknown = append(unknown, a.Need.String()+" ("+a.Err+")")
		case !a.Allowed:
			denied = append(denied, a.Need.String())
		}
	}
	switch {
	case len(denied) > 0:
		return r.judged(Fail, fmt.Sprintf("ServiceAccount %s may not %s", sa, strings.Join(denied, ", ")), f.Fix)
	case len(unknown) > 0:
		return r.judged(Warn, fmt.Sprintf("could not review %d of %d permissions of ServiceAccount %s: %s", len(unknown), len(f.Access), sa, unknown[0]),
			"run check as a user who may create subjectaccessreviews (cluster-admin)")
	}
	return r.judged(OK, fmt.Sprintf("ServiceAccount %s may do all %s its code needs", sa, plural(len(f.Access), "thing")), "")
}

// PlanRBAC lists each component's ServiceAccount and what it needs, as
// installed, with no access reviewed yet. links counts the link Secrets,
// egressMirrors the mirrors that point at the gateway's egress: what needs
// the controller and the gateway.
func PlanRBAC(in Install, links, egressMirrors int) []RBACFacts {
	ctl := RBACFacts{Component: "controller", Namespace: in.Controller.Namespace, ServiceAccount: in.Controller.ServiceAccount,
		Fix: "kubectl apply -f deploy/controller.yaml (your copy): its ClusterRole, Roles and bindings grant exactly these"}
	switch w := in.Controller; {
	case w.Err != "":
		ctl.ReadErr = fmt.Sprintf("Deployment %s/%s: %s", w.Namespace, w.Name, w.Err)
	case !w.Found:
		ctl.Why = fmt.Sprintf("no controller (Deployment %s/%s)", w.Namespace, w.Name)
		if links > 0 {
			ctl.Required = fmt.Sprintf("%d link Secrets wait for it to mirror their clusters' Services", links)
		} else {
			ctl.Why += ": this cluster links to no other"
		}
	default:
		ctl.Installed, ctl.Why = true, fmt.Sprintf("Deployment %s/%s", w.Namespace, w.Name)
		ctl.Access = accessOf(ControllerNeeds(ParseController(w.Args)))
	}

	gw := RBACFacts{Component: "gateway", Namespace: in.Gateway.Namespace, ServiceAccount: in.Gateway.ServiceAccount,
		Fix: "kubectl apply -f deploy/gateway.yaml (your copy): its ClusterRole, Role and bindings grant exactly these"}
	switch w := in.Gateway; {
	case w.Err != "":
		gw.ReadErr = fmt.Sprintf("Deployment %s/%s: %s", w.Namespace, w.Name, w.Err)
	case !w.Found:
		gw.Why = fmt.Sprintf("no gateway (Deployment %s/%s)", w.Namespace, w.Name)
		if egressMirrors > 0 {
			gw.Required = fmt.Sprintf("%d mirror Services point at its egress", egressMirrors)
			gw.Fix = "install the gateway (the chart's gateway.enabled, or deploy/gateway.yaml) after making Secret mcmirror/mcmirror-gateway-tls"
		} else {
			gw.Why += ": flat mode, or not linked"
		}
	default:
		events := ""
		if w.Env["POD_NAME"] {
			events = w.Namespace
		}
		gw.Installed, gw.Why = true, fmt.Sprintf("Deployment %s/%s", w.Namespace, w.Name)
		gw.Access = accessOf(GatewayNeeds(events))
	}

	dns := RBACFacts{Component: "dns", Namespace: in.DNS.Namespace, ServiceAccount: in.DNS.ServiceAccount,
		Fix: "kubectl apply -f deploy/coredns.yaml: its ClusterRole, Role and bindings for ServiceAccount kube-system/coredns"}
	patch := "kubectl apply -f deploy/coredns.yaml; kubectl -n kube-system patch deployment coredns --type=json --patch-file deploy/patches/coredns.yaml"
	switch w, d := in.DNS, ParseCorefile(in.Corefile); {
	case w.Err != "":
		dns.ReadErr = fmt.Sprintf("Deployment %s/%s: %s", w.Namespace, w.Name, w.Err)
	case w.Found && in.CorefileErr != "":
		dns.ReadErr = fmt.Sprintf("the Corefile of %s/%s: %s", w.Namespace, w.Name, in.CorefileErr)
	case !w.Found:
		dns.Why = fmt.Sprintf("no Deployment %s/%s: the cluster DNS is not CoreDNS as kubeadm installs it", w.Namespace, w.Name)
		if links > 0 {
			dns.Wanted = "mcmirror's own names (<svc>-global, <pod>.<svc>-<cluster>) are answered only by a DNS with mcmirror"
			dns.Fix = "deploy/README.md, The cluster DNS: what the patch needs"
		}
	case !d.Mcmirror:
		dns.Why = fmt.Sprintf("the cluster DNS %s/%s has no mcmirror block in its Corefile (%s)", w.Namespace, w.Name, in.CorefileFrom)
		if links > 0 {
			dns.Wanted = "mcmirror's own names (<svc>-global, <pod>.<svc>-<cluster>) are not answered"
			dns.Fix = patch
		}
	default:
		dns.Installed, dns.Why = true, fmt.Sprintf("Deployment %s/%s", w.Namespace, w.Name)
		dns.Access = accessOf(DNSNeeds(d))
	}

	lk := RBACFacts{Component: "link", Namespace: Namespace, ServiceAccount: LinkServiceAccount,
		Fix: "kubectl apply -f deploy/remote-link.yaml (coredns-mc link applies it too): its ClusterRole and binding"}
	switch {
	case in.LinkServiceAccountErr != "":
		lk.ReadErr = fmt.Sprintf("ServiceAccount %s/%s: %s", Namespace, LinkServiceAccount, in.LinkServiceAccountErr)
	case !in.LinkServiceAccount:
		lk.Why = fmt.Sprintf("no ServiceAccount %s/%s: no cluster links this one with deploy/remote-link.yaml's credentials", Namespace, LinkServiceAccount)
		if g := ParseGateway(in.Gateway.Args); in.Gateway.Found && len(g.AllowClusters) > 0 {
			lk.Wanted = fmt.Sprintf("the gateway lets %s in (--allow-cluster), so they link this cluster, usually with its tokens", strings.Join(g.AllowClusters, ", "))
			lk.Fix = "coredns-mc link --context THIS --cluster THIS-NAME --source-context OTHER, run for each cluster that links this one"
		}
	default:
		lk.Installed, lk.Why = true, fmt.Sprintf("ServiceAccount %s/%s", Namespace, LinkServiceAccount)
		lk.Access = accessOf(LinkNeeds())
	}
	return []RBACFacts{ctl, gw, dns, lk}
}

func accessOf(ns []Need) []Access {
	out := make([]Access, len(ns))
	for i, n := range ns {
		out[i] = Access{Need: n}
	}
	return out
}

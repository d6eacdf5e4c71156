package check

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// evalClusterName checks that the parts call this cluster by one name: the
// controller's and the gateway's --cluster and the Corefile's cluster.
func evalClusterName(in Install) Result {
	r := Result{ID: "cluster-name"}
	type named struct{ who, name string }
	var names []named
	if in.Controller.Found {
		names = append(names, named{"the controller's --cluster", ParseController(in.Controller.Args).Cluster})
	}
	if in.Gateway.Found {
		names = append(names, named{"the gateway's --cluster", ParseGateway(in.Gateway.Args).Cluster})
	}
	if d := ParseCorefile(in.Corefile); d.Mcmirror {
		names = append(names, named{"the Corefile's cluster (" + in.CorefileFrom + ")", d.Cluster})
	}
	if len(names) == 0 {
		return r.judged(OK, "no mcmirror part installed here names this cluster", "")
	}
	for _, n := range names {
		if n.name == "" {
			return r.judged(Fail, n.who+" is not set",
				"set the cluster's name: the chart's value cluster, or --cluster and the Corefile's cluster in your copy of deploy/*.yaml; apply")
		}
	}
	for _, n := range names[1:] {
		if n.name != names[0].name {
			return r.judged(Fail, fmt.Sprintf("%s is %q, but %s is %q: mirrors, certificates and DNS names disagree", names[0].who, names[0].name, n.who, n.name),
				"one name everywhere: the chart's value cluster, or --cluster of controller.yaml and gateway.yaml and cluster in coredns.yaml's Corefile; apply")
		}
	}
	var who []string
	for _, n := range names {
		who = append(who, strings.TrimPrefix(n.who, "the "))
	}
	return r.judged(OK, fmt.Sprintf("%q, as %s say", names[0].name, strings.Join(who, ", ")), "")
}

// evalSource checks that the DNS in import mode (source import) has what
// it reads: the controller, writing the flat-mode mirrors' endpoints.
func evalSource(in Install) Result {
	r := Result{ID: "dns-source"}
	d := ParseCorefile(in.Corefile)
	switch {
	case !d.Mcmirror || !d.Import:
		return r.judged(OK, "direct: the DNS watches the linked clusters itself", "")
	case !in.Controller.Found:
		return r.judged(Fail, "the Corefile's mcmirror reads the linked clusters from the controller's mirrors (source import), but no controller is installed: nothing of them is answered",
			"install the controller (the chart's controller.enabled), or use source direct (the chart's dns.source=direct)")
	case !ParseController(in.Controller.Args).MirrorFlatEndpoints:
		return r.judged(Fail, "the Corefile's mcmirror reads the linked clusters from the controller's mirrors (source import), but the controller runs without --mirror-flat-endpoints: flat-mode names answer no address",
			"add --mirror-flat-endpoints to the controller (the chart's dns.source=import sets both)")
	case d.KubernetesSelectsCopies:
		return r.judged(Warn, "import: the DNS reads the controller's mirrors, but its kubernetes plugin selects the controller's copies of the linked clusters' endpoints too, so every DNS pod holds each of them twice",
			"add `labels "+labels.NotFlatEndpoints+"` to the kubernetes plugin's block (`coredns-mc dns apply` and the chart's dns.source=import add it)")
	}
	return r.judged(OK, "import: the DNS reads the controller's mirrors, and the controller writes flat-mode endpoints (--mirror-flat-endpoints)", "")
}

// evalVersions compares the images of the parts that run coredns-mc.
// The parts expose no version of their own (no build_info metric), so the
// image reference is what tells them apart.
func evalVersions(in Install) Result {
	r := Result{ID: "versions"}
	type part struct{ who, image string }
	var parts []part
	if in.Controller.Found {
		parts = append(parts, part{"controller", in.Controller.Image})
	}
	if in.Gateway.Found {
		parts = append(parts, part{"gateway", in.Gateway.Image})
	}
	dnsNote := ""
	if in.DNS.Found {
		if ParseCorefile(in.Corefile).Mcmirror {
			parts = append(parts, part{"cluster DNS", in.DNS.Image})
		} else {
			dnsNote = fmt.Sprintf("; the cluster DNS runs %s without mcmirror, not compared", in.DNS.Image)
		}
	}
	switch len(parts) {
	case 0:
		return r.judged(OK, "no coredns-mc part installed here"+dnsNote, "")
	case 1:
		return r.judged(OK, fmt.Sprintf("only the %s runs coredns-mc: %s%s", parts[0].who, parts[0].image, dnsNote), "")
	}
	if slices.ContainsFunc(parts, func(p part) bool { return p.image != parts[0].image }) {
		var all []string
		for _, p := range parts {
			all = append(all, p.who+" "+p.image)
		}
		return r.judged(Warn, "the parts run different images: "+strings.Join(all, ", "),
			"one image everywhere: the chart's value image, or the image of controller.yaml, gateway.yaml and patches/coredns.yaml; apply and patch")
	}
	var who []string
	for _, p := range parts {
		who = append(who, p.who)
	}
	return r.judged(OK, fmt.Sprintf("%s run %s%s", strings.Join(who, ", "), parts[0].image, dnsNote), "")
}

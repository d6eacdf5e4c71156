package check

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
)

// EgressFacts is what check found of the egress ports.
type EgressFacts struct {
	// Controller and Gateway are whether each is installed, and its
	// configuration.
	Controller, Gateway bool
	ControllerCfg       ControllerConfig
	GatewayCfg          GatewayConfig
	GatewayHostNetwork  bool
	// Claims are the controller's mirror Services' egress-ports
	// annotations, by namespace/name; ClaimsErr why they are unknown.
	Claims    map[string]map[string]int32
	ClaimsErr string
	// NodePorts is the cluster's NodePort range, NodePortsFrom where it was
	// read; empty with NodePortsErr when it could not be determined.
	NodePorts     string
	NodePortsFrom string
	NodePortsErr  string
}

// ClaimsOf reads the egress-ports annotations of the controller's mirrors.
func ClaimsOf(mirrors []corev1.Service) map[string]map[string]int32 {
	out := map[string]map[string]int32{}
	for _, s := range mirrors {
		if s.Labels[labels.ManagedBy] != labels.ManagedByValue || s.DeletionTimestamp != nil {
			continue
		}
		if a := s.Annotations[labels.EgressPorts]; a != "" {
			out[s.Namespace+"/"+s.Name] = labels.ParseEgressPorts(a)
		}
	}
	return out
}

func evalEgress(f EgressFacts) Result {
	r := Result{ID: "egress-ports"}
	if !f.Controller && !f.Gateway {
		return r.judged(OK, "neither the controller nor the gateway is installed: no egress ports", "")
	}
	if f.Controller && f.ControllerCfg.EgressPorts == "" {
		return r.judged(Fail, "the controller has no --egress-ports: it cannot start",
			"set --egress-ports LO-HI (the chart's value egressPorts, default 30000-32767), then apply")
	}
	var problems []Result
	add := func(s Status, msg, fix string) { problems = append(problems, r.judged(s, msg, fix)) }

	var rng labels.PortRange
	var rangeErr error
	src := "the controller's"
	switch {
	case f.Controller:
		rng, rangeErr = labels.ParsePortRange(f.ControllerCfg.EgressPorts)
	case f.GatewayCfg.EgressPorts != "":
		rng, rangeErr, src = parseRange(f.GatewayCfg.EgressPorts), nil, "the gateway's"
	}
	if rangeErr != nil {
		add(Fail, "the controller's --egress-ports: "+rangeErr.Error(), "set --egress-ports LO-HI (the chart's value egressPorts)")
	}
	if f.Controller && f.Gateway && f.GatewayCfg.Egress {
		switch g := f.GatewayCfg.EgressPorts; {
		case g == "":
			add(Warn, fmt.Sprintf("the gateway has no --egress-ports: it believes claims on any port, where the controller uses %s", f.ControllerCfg.EgressPorts),
				"give the gateway --egress-ports "+f.ControllerCfg.EgressPorts+" (the chart writes its egressPorts into both Deployments)")
		case parseRange(g) != rng:
			add(Fail, fmt.Sprintf("the controller's --egress-ports %s and the gateway's %s differ: the gateway ignores the claims outside its range", f.ControllerCfg.EgressPorts, g),
				"one --egress-ports in both Deployments (the chart's value egressPorts); apply, and both roll")
		}
	}
	if f.Gateway && !rng.IsZero() {
		for _, l := range []struct{ flag, addr string }{{"--ingress-address", f.GatewayCfg.IngressAddress}, {"--metrics-addr", f.GatewayCfg.MetricsAddress}} {
			if p, ok := portOf(l.addr); ok && rng.Contains(p) {
				add(Fail, fmt.Sprintf("the gateway's %s port %d is inside the egress range %s: the egress cannot bind it", l.flag, p, rng),
					"choose an egress range without the gateway's own ports (--egress-ports, the chart's egressPorts)")
			}
		}
	}
	nodeNote := ""
	if !rng.IsZero() {
		switch {
		case f.NodePorts == "":
			nodeNote = "the NodePort range could not be determined (" + f.NodePortsErr + ")"
			if f.GatewayHostNetwork {
				add(Warn, "the gateway runs on the host network and "+nodeNote+": egress ports and node ports may collide",
					"compare --egress-ports with kube-apiserver's --service-node-port-range and keep them apart")
			}
		case overlaps(rng, parseRange(f.NodePorts)):
			if f.GatewayHostNetwork {
				add(Fail, fmt.Sprintf("the gateway runs on the host network and its egress range %s overlaps the NodePort range %s (%s): the node ports of Services and the egress collide", rng, f.NodePorts, f.NodePortsFrom),
					"set --egress-ports (the chart's egressPorts) to a range outside "+f.NodePorts)
			} else {
				nodeNote = fmt.Sprintf("overlaps the NodePort range %s (%s), harmlessly: the egress listens in the gateway pods' own network namespace", f.NodePorts, f.NodePortsFrom)
			}
		default:
			nodeNote = fmt.Sprintf("apart from the NodePort range %s", f.NodePorts)
		}
	}
	claimed := 0
	if f.ClaimsErr != "" {
		add(Warn, "could not read the mirrors' egress ports: "+f.ClaimsErr, "run check as a user who may list services in every namespace")
	} else {
		byPort := map[int32][]string{}
		var outside []string
		for _, m := range slices.Sorted(maps.Keys(f.Claims)) {
			for _, k := range slices.Sorted(maps.Keys(f.Claims[m])) {
				p := f.Claims[m][k]
				byPort[p] = append(byPort[p], m+" "+k)
				claimed++
				if !rng.IsZero() && !rng.Contains(p) {
					outside = append(outside, fmt.Sprintf("%s %s=%d", m, k, p))
				}
			}
		}
		for _, p := range slices.Sorted(maps.Keys(byPort)) {
			if len(byPort[p]) > 1 {
				add(Fail, fmt.Sprintf("egress port %d is claimed by %d mirrors: %s; the gateway serves one of them", p, len(byPort[p]), strings.Join(byPort[p], ", ")),
					"apply deploy/admission-policy.yaml (only the controller may write the claims), and delete the mirror Services that are not the controller's: it makes its own again")
				break
			}
		}
		if len(outside) > 0 {
			add(Warn, fmt.Sprintf("%s of mirrors claim egress ports outside %s %s, which the gateway ignores: %s", plural(len(outside), "port"), src, rng, outside[0]),
				"the controller moves them into its range at its next sync of each; a range made smaller leaves them until then")
		}
	}
	if len(problems) > 0 {
		r = mostSevere(problems)
		if len(problems) > 1 {
			r.Message += fmt.Sprintf(" (and %d more problems)", len(problems)-1)
		}
		return r
	}
	msg := fmt.Sprintf("%s %s; %s claimed, none twice", src, rng, plural(claimed, "port"))
	if f.Controller && f.Gateway {
		msg = fmt.Sprintf("controller and gateway agree on %s; %s claimed, none twice", rng, plural(claimed, "port"))
	}
	if nodeNote != "" {
		msg += "; " + nodeNote
	}
	return r.judged(OK, msg, "")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func parseRange(s string) labels.PortRange {
	r, _ := labels.ParsePortRange(s)
	return r
}

func overlaps(a, b labels.PortRange) bool {
	return !a.IsZero() && !b.IsZero() && a.First <= b.Last && b.First <= a.Last
}

func portOf(addr string) (int32, bool) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return int32(n), err == nil && n > 0
}

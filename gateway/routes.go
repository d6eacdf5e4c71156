package gateway

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
)

// Route is where the egress carries the connections of one egress port: a
// destination in a linked cluster.
type Route struct {
	Cluster string
	Dest    Destination
	// Mirror is the mirror Service that recorded the port (namespace/name),
	// for logs.
	Mirror string
}

// Routes computes the egress route table from the local mirror Services:
// each port recorded in a mirror's mcmirror.dev/egress-ports annotation goes
// to the remote Service (or, for a per-pod mirror, the remote pod) and port
// the mirror stands for. A port recorded by two mirrors is served by
// neither, and returned in conflicts with the mirrors that record it: which
// one is right cannot be told, and a connection carried to the wrong
// Service is worse than one refused. Only TCP ports are carried. It is
// pure: the egress applies the result.
func Routes(mirrors []*corev1.Service) (routes map[int32]Route, conflicts map[int32][]string) {
	routes = map[int32]Route{}
	conflicts = map[int32][]string{}
	for _, svc := range mirrors {
		l := svc.Labels
		if l[labels.ManagedBy] != labels.ManagedByValue || l[labels.ClusterName] == "" || l[labels.RemoteService] == "" {
			continue
		}
		name := svc.Namespace + "/" + svc.Name
		for key, egressPort := range labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts]) {
			port, proto, ok := labels.SplitEgressPortKey(key)
			if !ok || proto != string(corev1.ProtocolTCP) {
				continue
			}
			r := Route{
				Cluster: l[labels.ClusterName],
				Dest:    Destination{Namespace: svc.Namespace, Service: l[labels.RemoteService], Host: l[labels.RemoteHostname], Port: port},
				Mirror:  name,
			}
			if owners, bad := conflicts[egressPort]; bad {
				conflicts[egressPort] = append(owners, name)
				continue
			}
			if prev, taken := routes[egressPort]; taken {
				delete(routes, egressPort)
				conflicts[egressPort] = []string{prev.Mirror, name}
				continue
			}
			routes[egressPort] = r
		}
	}
	for p := range conflicts {
		slices.Sort(conflicts[p])
	}
	return routes, conflicts
}

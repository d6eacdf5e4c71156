package index

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// Federated Services, for clients outside the mesh. For members named
// <svc> (Services labelled mirror.linkerd.io/federated=member), Linkerd's
// service mirror makes in the local cluster a Service <svc>-federated: a
// ClusterIP without endpoints, labelled as a mirror but with no cluster
// name, whose members are in its annotations (remote-discovery:
// <svc>@<cluster>,...; local-discovery: <svc>). Linkerd's proxies ask its
// destination controller for the members' pods; a client outside the mesh
// that resolves the name gets a ClusterIP that leads nowhere. So:
//
//	<svc>-federated.<ns>.svc.<zone>             every routable member's ready addresses
//	<cluster>.<svc>-federated.<ns>.svc.<zone>   one linked cluster's member (an SRV target)
//	_<port>._<proto>.<either of those>          SRV, as -global answers it
//
// A member of a linked cluster is routable in flat mode only: its pod
// addresses, which Linkerd's federated mode needs reachable too. One that
// its cluster exports in gateway mode is left out: only Linkerd's proxy
// could reach it. The local member answers as in -global (its ClusterIP,
// or its pods' addresses when headless), while it has a ready endpoint.
// The name is claimed only while some member has a ready address: else it
// goes down the plugin chain, to the kubernetes plugin's answer (the
// Service's own ClusterIP, what meshed clients use).

// federations returns the keys of the federated groups that Service k is
// a member of, in any cluster: a change of its objects rebuilds them too.
func (x *Index) federations(k object.GroupKey) []object.GroupKey {
	if _, ok := k.Federated(); ok {
		return nil
	}
	var out []object.GroupKey
	for _, name := range x.src.Federations(k.NS, k.Svc) {
		out = append(out, object.FederatedKey(k.NS, name))
	}
	return out
}

// buildFederated computes the group of federated Service ns/name: its
// local member first, then its flat-mode members in link order, each
// with a ready address; nil when none has one, so that the name is not
// claimed.
func (x *Index) buildFederated(k object.GroupKey, name string, old *group) *group {
	fm := x.src.Mirror(k.NS, name)
	if fm == nil || fm.Fed == nil || fm.Cluster != "" || !object.ValidLabel(k.NS) || !object.ValidLabel(name) {
		x.drops.note(k, nil)
		return nil
	}
	g := &group{key: k}
	if svc := fm.Fed.Local; svc != "" {
		s := x.src.Member(x.local, k.NS, svc)
		if s != nil && !s.ExternalName && x.hasReady(x.local, s) {
			if m := x.buildMember(object.ServiceKey(k.NS, svc), x.local, s, old.member(x.local)); m != nil && len(m.v4)+len(m.v6) > 0 {
				g.members = append(g.members, m)
			}
		}
	}
	var dropped []dropped
	for _, c := range x.src.Links() {
		i := slices.IndexFunc(fm.Fed.Remote, func(e object.FedMember) bool { return e.Cluster == c })
		if i < 0 {
			continue
		}
		svc := fm.Fed.Remote[i].Service
		s := x.src.Member(c, k.NS, svc)
		if s == nil || s.ExternalName || s.Mode != labels.Flat {
			continue // gateway mode: only Linkerd's proxy reaches it
		}
		m := x.makeMember(object.ServiceKey(k.NS, svc), c, s, old.member(c), name)
		if m == nil || len(m.v4)+len(m.v6) == 0 {
			continue
		}
		g.members = append(g.members, m)
		if e := x.src.Service(c, k.NS, svc); e == nil || e.Mode != labels.Flat {
			dropped = append(dropped, m.dropped...) // else its export's group notes them
		}
	}
	x.drops.note(k, dropped)
	if len(g.members) == 0 {
		return nil
	}
	g.hidden = make([]bool, len(g.members))
	g.global = make([]string, len(x.zones))
	for zi, z := range x.zones[:x.nMirror] {
		if n := name + "." + k.NS + ".svc." + z; validName(n) {
			g.global[zi] = n
		}
	}
	g.v4, g.v6 = globalAddrs(g)
	return g
}

// hasReady reports whether Service s of cluster has an endpoint to answer:
// a ready one, or any when it publishes not-ready addresses.
func (x *Index) hasReady(cluster string, s *object.Service) bool {
	for _, sl := range x.src.Slices(cluster, s.Namespace, s.Name) {
		for _, e := range sl.Endpoints {
			if (e.Ready || s.PublishNotReady) && len(e.Addresses) > 0 {
				return true
			}
		}
	}
	return false
}

package index

import (
	"maps"
	"slices"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// The gateway health (gateway_health): the gateway-mode members of a
// cluster whose gateway is down leave the -global names; its own names keep
// answering. The handler polls the gateway's peer states and tells the
// index (SetGatewaysDown), which names the groups a change rebuilds: only
// those with gateway-mode members of the clusters that changed.

// gatewayState is which clusters' gateways are down. It is immutable: a
// change installs a new one, so that a build can tell, by comparing
// pointers, whether the state changed while it ran.
type gatewayState struct {
	down map[string]bool
}

// hides reports whether m stays out of the -global names: it is a
// gateway-mode member of a cluster whose gateway is down. Flat-mode members
// need no gateway, and the local cluster's are never gateway members.
func (s *gatewayState) hides(m *member) bool {
	return s != nil && m.gateway && s.down[m.cluster]
}

// SetGatewaysDown makes down the clusters whose gateway is down (none:
// every gateway is alive), and returns the groups to rebuild for the
// clusters changed: those with a gateway-mode member of one of them.
func (x *Index) SetGatewaysDown(down map[string]bool, changed []string) []object.GroupKey {
	if len(down) == 0 {
		x.down.Store(nil)
	} else {
		x.down.Store(&gatewayState{down: maps.Clone(down)})
	}
	return x.GatewayGroups(changed)
}

// noteGateways records, with x.mu held, the clusters that have a
// gateway-mode member in group k; only with gateway_health.
func (x *Index) noteGateways(k object.GroupKey, clusters []string) {
	if !x.trackGateways {
		return
	}
	if len(clusters) == 0 {
		delete(x.gateways, k)
		return
	}
	if x.gateways == nil {
		x.gateways = map[object.GroupKey][]string{}
	}
	x.gateways[k] = clusters
}

// GatewayGroups returns the groups that have a gateway-mode member of one
// of clusters, sorted: those a change of their health rebuilds. None
// without gateway_health.
func (x *Index) GatewayGroups(clusters []string) []object.GroupKey {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var ks []object.GroupKey
	for k, cs := range x.gateways {
		if slices.ContainsFunc(cs, func(c string) bool { return slices.Contains(clusters, c) }) {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b object.GroupKey) int {
		if groupLess(a, b) {
			return -1
		}
		if groupLess(b, a) {
			return 1
		}
		return 0
	})
	return ks
}

// gatewayClusters returns the clusters that have a gateway-mode member in
// members, sorted.
func gatewayClusters(members []*member) []string {
	var cs []string
	for _, m := range members {
		if m.gateway && !slices.Contains(cs, m.cluster) {
			cs = append(cs, m.cluster)
		}
	}
	slices.Sort(cs)
	return slices.Clip(cs)
}

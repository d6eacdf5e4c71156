package harness

import (
	"fmt"
	"net/netip"
)

// Dual-stack API servers (ClusterOptions.DualStack): the service range is
// IPv4 then IPv6, so IPv4 stays the primary family, and Services that ask
// for it (PreferDualStack, RequireDualStack, or ipFamilies [IPv6]) get
// IPv6 ClusterIPs too. Pods stay IPv4: KWOK gives them one address, and
// the data plane is IPv4 only.

// serviceCIDRv6 is the IPv6 service range of the i-th cluster:
// fd00:10:<96+i>::/112, as its IPv4 range is 10.<96+i>.0.0/16 (the group
// reads as the decimal octet), distinct per cluster. /112 (65536
// addresses) is well within what the API server's allocator takes for
// IPv6 (a mask of /108 or longer).
func serviceCIDRv6(i int) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("fd00:10:%d::/112", 96+i))
}

// serviceClusterIPRange is kube-apiserver's --service-cluster-ip-range:
// the IPv4 range, and the IPv6 one in a dual-stack cluster.
func (c *Cluster) serviceClusterIPRange() string {
	if !c.ServiceCIDRv6.IsValid() {
		return c.ServiceCIDR.String()
	}
	return c.ServiceCIDR.String() + "," + c.ServiceCIDRv6.String()
}

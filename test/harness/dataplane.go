package harness

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeProxyHealthPort is where kube-proxy serves /healthz, on the node's
// address (each node is a namespace of its own, so one port fits all).
const kubeProxyHealthPort = 10256

// NodeIP is the address of the cluster's simulated node on the node
// network: what its kube-proxy, cluster DNS and gateway listen on, and what
// other clusters' nodes reach it at. It is invalid without a data plane.
func (c *Cluster) NodeIP() netip.Addr {
	if c.node == nil {
		return netip.Addr{}
	}
	return c.node.ip
}

// DNSServiceIP is the ClusterIP of the cluster DNS Service, kube-system/
// kube-dns: the tenth address of the service CIDR, as kubeadm picks it.
// Every pod's resolv.conf names it. It answers once a test runs a fleet
// with a DNS server (StartFleet).
func (c *Cluster) DNSServiceIP() netip.Addr {
	a := c.ServiceCIDR.Addr().As4()
	a[3] += 10
	return netip.AddrFrom4(a)
}

// startDataPlane gives a cluster whose node is Ready a cluster DNS Service,
// starts kube-proxy in the node's namespace and waits until it serves, and
// starts running the node's pods.
func (c *Cluster) startDataPlane(ctx context.Context) error {
	if err := c.createDNSService(ctx); err != nil {
		return err
	}
	if err := c.startKubeProxy(ctx, NodeName); err != nil {
		return err
	}
	c.pods = newPodRunner(c)
	return c.pods.start()
}

// createDNSService creates kube-system/kube-dns at DNSServiceIP, port 53
// over UDP and TCP, with an EndpointSlice that points at the node's
// address, where a fleet's DNS runs.
func (c *Cluster) createDNSService(ctx context.Context) error {
	ports := []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem},
		Spec:       corev1.ServiceSpec{ClusterIP: c.DNSServiceIP().String(), Ports: ports},
	}
	if _, err := c.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: cluster DNS Service: %w", c.Name, err)
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-node", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns",
			discoveryv1.LabelManagedBy:   "harness.mcmirror.dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{c.node.ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			NodeName:   new(NodeName),
		}},
	}
	for _, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: new(p.Name), Port: new(p.Port), Protocol: new(p.Protocol)})
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: cluster DNS EndpointSlice: %w", c.Name, err)
	}
	return nil
}

// inNode returns argv run in the network namespace of c's node, as a
// hostNetwork pod runs: it reaches the API servers, its own cluster's pods
// and ClusterIPs, and the other nodes; the host reaches it at NodeIP.
func (c *Cluster) inNode(argv ...string) ([]string, error) {
	if c.node == nil {
		return nil, fmt.Errorf("%s has no data plane", c.Name)
	}
	return append([]string{"ip", "netns", "exec", c.node.netns}, argv...), nil
}

// RoutePodsBetweenClusters turns the routes between the nodes for each
// other's pod CIDRs on (flat mode: a pod reaches another cluster's pod IPs)
// or off (gateway mode, the default: only nodes reach each other, so
// traffic between clusters goes through the gateways).
func (e *Env) RoutePodsBetweenClusters(on bool) error {
	if e.nodes == nil {
		return fmt.Errorf("harness: no cluster has a data plane")
	}
	return e.nodes.setFlat(on)
}

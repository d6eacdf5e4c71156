package controller

// Where the mirrors' egress EndpointSlices point: one fixed address
// (Options.EgressAddress), or every ready address of the gateway's egress
// Service (Options.EgressService), followed as its pods come and go.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mcmirror/mcmirror/internal/options"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// maxEgressAddresses is the most endpoints one EndpointSlice may hold.
const maxEgressAddresses = 1000

// ParseEgressService parses NAMESPACE/NAME, the local Service whose ready
// endpoints are the gateway egress addresses (--egress-service).
func ParseEgressService(s string) (types.NamespacedName, error) { return options.ParseEgressService(s) }

// validateEgressOptions checks that exactly one egress source is given.
func validateEgressOptions(opts Options) error {
	fixed, svc := opts.EgressAddress.IsValid(), opts.EgressService != (types.NamespacedName{})
	switch {
	case fixed && svc:
		return errors.New("controller: an egress address and an egress Service: give one")
	case fixed:
		if !endpointAddressAllowed(opts.EgressAddress) {
			return fmt.Errorf("controller: egress address %s: the API server refuses loopback, unspecified, link-local and multicast endpoint addresses", opts.EgressAddress)
		}
		return nil
	case svc:
		if err := options.ValidateEgressService(opts.EgressService); err != nil {
			return fmt.Errorf("controller: egress Service: %w", err)
		}
		return nil
	}
	return errors.New("controller: no egress address and no egress Service")
}

// endpointAddressAllowed reports whether the API server takes a as an
// endpoint address.
func endpointAddressAllowed(a netip.Addr) bool {
	return a.IsValid() && !a.IsLoopback() && !a.IsUnspecified() && !a.IsLinkLocalUnicast() &&
		!a.IsLinkLocalMulticast() && !a.IsMulticast()
}

// EgressAddresses computes, from the EndpointSlices of the egress Service
// ns/svc, the addresses the mirrors' egress EndpointSlices list: every
// ready address (Ready unset counts as ready, as the API says),
// deduplicated and sorted (IPv4 before IPv6), of both families: a
// dual-stack gateway gives each mirror an EndpointSlice per family
// (slices.go). Slices of other Services, FQDN slices and addresses the API
// server refuses as endpoints are skipped; at most 1000 addresses of each
// family (one EndpointSlice) are returned. None means the Service has no
// ready address.
func EgressAddresses(ns, svc string, eps []*discoveryv1.EndpointSlice) []netip.Addr {
	var cands []netip.Addr
	for _, es := range eps {
		if es == nil || es.Namespace != ns || es.Labels[discoveryv1.LabelServiceName] != svc ||
			(es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			cands = appendAddresses(cands, ep.Addresses)
		}
	}
	return pickAddresses(cands)
}

// lastEgressAddresses returns, by the same rule, the addresses the existing
// egress EndpointSlices point at, whatever their readiness (a not-ready
// per-pod mirror's endpoints are not ready): what the mirrors were last
// given, kept at start-up while the egress Service has no ready address.
func lastEgressAddresses(eps []*discoveryv1.EndpointSlice) []netip.Addr {
	var cands []netip.Addr
	for _, es := range eps {
		if !isEgressSlice(es) {
			continue
		}
		for _, ep := range es.Endpoints {
			cands = appendAddresses(cands, ep.Addresses)
		}
	}
	return pickAddresses(cands)
}

func appendAddresses(out []netip.Addr, addrs []string) []netip.Addr {
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// pickAddresses keeps the allowed addresses, sorted (IPv4 first), without
// duplicates, at most maxEgressAddresses of each family.
func pickAddresses(cands []netip.Addr) []netip.Addr {
	cands = slices.DeleteFunc(cands, func(a netip.Addr) bool { return !endpointAddressAllowed(a) || a.Zone() != "" })
	slices.SortFunc(cands, netip.Addr.Compare)
	cands = slices.Compact(cands)
	var out []netip.Addr
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		of := addressesOf(cands, at)
		out = append(out, of[:min(len(of), maxEgressAddresses)]...)
	}
	return out
}

// addressesOf returns the addresses of addrs of address type at, in order.
func addressesOf(addrs []netip.Addr, at discoveryv1.AddressType) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if addressType(a) == at {
			out = append(out, a)
		}
	}
	return out
}

// egressFamilies lists the IP families of the egress addresses, IPv4
// first: the families an egress mirror may have (plan.go).
func egressFamilies(addrs []netip.Addr) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		if slices.ContainsFunc(addrs, func(a netip.Addr) bool { return addressType(a) == at }) {
			out = append(out, corev1.IPFamily(at))
		}
	}
	return out
}

// isEgressSlice tells an egress EndpointSlice (endpoints at the gateway,
// without hostnames) from a headless mirror's (one endpoint per per-pod
// mirror, each under its remote hostname). A slice without endpoints
// counts as egress: its ports are then kept rather than released.
func isEgressSlice(es *discoveryv1.EndpointSlice) bool {
	if es == nil {
		return false
	}
	for _, ep := range es.Endpoints {
		if ep.Hostname != nil && *ep.Hostname != "" {
			return false
		}
	}
	return true
}

// Effects: the informer on the egress Service's EndpointSlices, and the
// addresses in use.

// newEgressInformer makes the informer on the egress Service's
// EndpointSlices (nil with a fixed egress address) and sets the addresses
// in use for a fixed one.
func (c *Controller) newEgressInformer() error {
	if !c.opts.EgressAddress.IsValid() {
		n := c.opts.EgressService
		c.egressSlices = discoveryinformers.NewFilteredEndpointSliceInformer(c.client, n.Namespace, resyncPeriod, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + n.Name })
		_ = c.egressSlices.SetTransform(trim)
		reg, err := c.egressSlices.AddEventHandler(remote.OnAny(func(any) { c.refreshEgress(false) }))
		if err != nil {
			return err
		}
		c.localSynced = append(c.localSynced, reg.HasSynced)
		return nil
	}
	c.egressAddrs = []netip.Addr{c.opts.EgressAddress.Unmap()}
	egressAddressesGauge.Set(1)
	return nil
}

// localInformers are the informers on the local cluster that Run waits
// for.
func (c *Controller) localInformers() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{c.services, c.slices, c.namespaces}
	if c.egressSlices != nil {
		out = append(out, c.egressSlices)
	}
	if c.mcs != nil {
		out = append(out, c.mcs.informers()...)
	}
	return out
}

// initEgress reads the egress addresses once the local informers have
// synced; until then informer events are ignored.
func (c *Controller) initEgress() {
	if c.egressSlices == nil {
		return
	}
	c.egressStarted.Store(true)
	c.refreshEgress(true)
}

// egressAddresses returns the addresses the egress EndpointSlices list.
func (c *Controller) egressAddresses() []netip.Addr {
	c.egressMu.Lock()
	defer c.egressMu.Unlock()
	return c.egressAddrs
}

// refreshEgress recomputes the egress addresses from the egress Service's
// EndpointSlices. When they change, every key with mirrors is enqueued, and
// its sync rewrites the egress EndpointSlices that differ. While the
// Service has no ready address the last known addresses are kept (at
// start-up: those the existing egress EndpointSlices point at), so that a
// gateway briefly without a ready pod does not empty every mirror.
func (c *Controller) refreshEgress(startup bool) {
	if !startup && !c.egressStarted.Load() {
		return
	}
	n := c.opts.EgressService
	// The store is read under the lock, so that the last refresh reads
	// the latest state.
	c.egressMu.Lock()
	var eps []*discoveryv1.EndpointSlice
	for _, o := range c.egressSlices.GetStore().List() {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			eps = append(eps, es)
		}
	}
	ready := EgressAddresses(n.Namespace, n.Name, eps)
	old, next := c.egressAddrs, ready
	if len(ready) == 0 {
		next = old
		if startup && len(next) == 0 {
			next = lastEgressAddresses(c.ownedSlices())
		}
		if startup || !c.egressEmpty {
			klog.InfoS("Egress Service has no ready address; the mirrors keep the last known egress addresses",
				"service", n.String(), "addresses", next)
		}
		c.egressEmpty = true
	} else {
		c.egressEmpty = false
	}
	c.egressAddrs = next
	egressAddressesGauge.Set(float64(len(next)))
	c.egressMu.Unlock()

	if slices.Equal(old, next) {
		return
	}
	keys := c.ownedKeys()
	klog.InfoS("Egress addresses changed", "service", n.String(), "addresses", next, "previous", old, "keys", len(keys))
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// ownedSlices lists the controller's EndpointSlices.
func (c *Controller) ownedSlices() []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, o := range c.slices.GetStore().List() {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			if _, owned := ownedKey(es); owned {
				out = append(out, es)
			}
		}
	}
	return out
}

// ownedKeys lists, sorted, the keys the controller has Services or
// EndpointSlices for.
func (c *Controller) ownedKeys() []string {
	var keys []string
	for _, inf := range []cache.SharedIndexInformer{c.services, c.slices} {
		keys = append(keys, inf.GetIndexer().ListIndexFuncValues(byKey)...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

package gateway

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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

// Why a claim on an egress port is not believed: the values of the
// egress_claims_ignored gauge's reason label.
const (
	ignoredDeleting   = "deleting"      // the object is being deleted (deletionTimestamp set)
	ignoredIncomplete = "incomplete"    // no cluster or remote Service label
	ignoredName       = "name_mismatch" // the name is not the one the controller gives such a mirror
	ignoredFlat       = "flat_mirror"   // a flat-mode mirror, which has no egress ports
	ignoredRange      = "out_of_range"  // outside the controller's --egress-ports
)

var ignoredReasons = []string{ignoredDeleting, ignoredIncomplete, ignoredName, ignoredFlat, ignoredRange}

// RouteTrust is what the egress believes a claim on an egress port by. A
// mirror Service claims a port by recording it in its
// mcmirror.dev/egress-ports annotation, and anyone who may write Services
// may write that annotation unless deploy/admission-policy.yaml is applied.
// So a claim counts only when the object is not being deleted, its name and
// labels are those the controller writes, and the port is in the
// controller's range; and when two claims name one port, one of them is
// served, never neither:
//
//  1. the claim corroborated by the controller's EndpointSlice of that
//     mirror (labelled endpointslice.kubernetes.io/managed-by=
//     controller.mcmirror.dev, owned by the Service's UID, with that port),
//     which the default edit and admin roles cannot write, and which is
//     what kube-proxy sends the mirror's ClusterIP to;
//  2. then the older Service (creationTimestamp);
//  3. then the smaller namespace/name, then service port.
//
// Every replica of the gateway computes the same table from the same
// objects.
type RouteTrust struct {
	// Ports is the controller's --egress-ports range; a claim on a port
	// outside it is ignored. The zero range accepts any port.
	Ports labels.PortRange

	w *claimWatch
}

// claimWatch is the informer on the controller's EndpointSlices, and what
// has been logged of the ignored claims.
type claimWatch struct {
	slices cache.SharedIndexInformer
	logger klog.Logger

	mu      sync.Mutex
	ignored map[string]string // namespace/name → reason, as last logged
}

// watch adds to f, the egress's informer factory (which selects the
// controller's mirror objects by their labels, EndpointSlices included), an
// informer on EndpointSlices, whose changes call kick. It returns the
// informer's HasSynced; Routes uses the slices from then on.
func (t *RouteTrust) watch(f informers.SharedInformerFactory, logger klog.Logger, kick func(any)) cache.InformerSynced {
	inf := f.Discovery().V1().EndpointSlices().Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			// Only who owns it and its ports matter here.
			es.ManagedFields, es.Annotations, es.Endpoints = nil, nil, nil
		}
		return obj, nil
	})
	_, _ = inf.AddEventHandler(remote.OnAny(kick))
	t.w = &claimWatch{slices: inf, logger: logger, ignored: map[string]string{}}
	if t.Ports.IsZero() {
		logger.Info("No --egress-ports: claims on any port are believed; give the gateway the controller's --egress-ports")
	}
	return inf.HasSynced
}

// Routes computes the egress route table from the local mirror Services
// (and, once watch has run, the controller's EndpointSlices): each port
// claimed in a mirror's mcmirror.dev/egress-ports annotation goes to the
// remote Service (or, for a per-pod mirror, the remote pod) and port the
// mirror stands for. conflicts lists, for each port claimed more than once,
// the mirror served first and then the others. Only TCP ports are carried.
// Ignored claims are counted in egress_claims_ignored and logged once.
func (t *RouteTrust) Routes(mirrors []*corev1.Service) (routes map[int32]Route, conflicts map[int32][]string) {
	var eps []*discoveryv1.EndpointSlice
	if t.w != nil {
		for _, o := range t.w.slices.GetStore().List() {
			if es, ok := o.(*discoveryv1.EndpointSlice); ok {
				eps = append(eps, es)
			}
		}
	}
	tab := computeRoutes(mirrors, eps, t.Ports)
	t.record(tab.ignored)
	return tab.routes, tab.conflicts
}

// record sets the gauge and logs each object whose claims became ignored,
// or changed reason, once.
func (t *RouteTrust) record(ignored []ignoredClaim) {
	counts := map[string]int{}
	for _, ic := range ignored {
		counts[ic.reason] += ic.ports
	}
	for _, r := range ignoredReasons {
		egressClaimsIgnored.WithLabelValues(r).Set(float64(counts[r]))
	}
	if t.w == nil {
		return
	}
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	now := map[string]bool{}
	for _, ic := range ignored {
		// An object has one reason: a whole object's, or out_of_range.
		now[ic.mirror] = true
		if t.w.ignored[ic.mirror] != ic.reason {
			t.w.logger.Info("Ignored a Service's claim on egress ports", "service", ic.mirror, "reason", ic.reason, "ports", ic.ports, "range", t.Ports.String())
			t.w.ignored[ic.mirror] = ic.reason
		}
	}
	maps.DeleteFunc(t.w.ignored, func(m, _ string) bool { return !now[m] })
}

// routeTable is computeRoutes's result.
type routeTable struct {
	routes    map[int32]Route
	conflicts map[int32][]string
	ignored   []ignoredClaim
}

// ignoredClaim is one object's claims not believed, and why.
type ignoredClaim struct {
	mirror string // namespace/name
	reason string
	ports  int // how many TCP claims
}

// claim is one believable claim on one egress port.
type claim struct {
	svc          *corev1.Service
	route        Route
	corroborated bool
}

// compare is negative when claim a beats claim b to a port: see RouteTrust.
func (a claim) compare(b claim) int {
	if a.corroborated != b.corroborated {
		if a.corroborated {
			return -1
		}
		return 1
	}
	return cmp.Or(a.svc.CreationTimestamp.Compare(b.svc.CreationTimestamp.Time),
		cmp.Compare(a.route.Mirror, b.route.Mirror), cmp.Compare(a.route.Dest.Port, b.route.Dest.Port))
}

// computeRoutes is the route table of mirrors, with eps the controller's
// EndpointSlices, ports the controller's range. It is pure.
func computeRoutes(mirrors []*corev1.Service, eps []*discoveryv1.EndpointSlice, ports labels.PortRange) routeTable {
	owned := corroborations(eps)
	byPort := map[int32][]claim{}
	var ignored []ignoredClaim
	for _, svc := range mirrors {
		l := svc.Labels
		if l[labels.ManagedBy] != labels.ManagedByValue {
			continue // not even claiming to be the controller's
		}
		name := svc.Namespace + "/" + svc.Name
		recorded := labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])
		var tcp []string
		for key := range recorded {
			if _, proto, ok := labels.SplitEgressPortKey(key); ok && proto == string(corev1.ProtocolTCP) {
				tcp = append(tcp, key)
			}
		}
		if len(tcp) == 0 {
			continue
		}
		slices.Sort(tcp)
		why := ""
		switch {
		case svc.DeletionTimestamp != nil:
			why = ignoredDeleting
		case l[labels.ClusterName] == "" || l[labels.RemoteService] == "":
			why = ignoredIncomplete
		case !labels.MirrorNameMatches(svc.Name, l):
			why = ignoredName
		case l[labels.ModeLabel] == labels.ModeFlat:
			why = ignoredFlat
		}
		if why != "" {
			ignored = append(ignored, ignoredClaim{mirror: name, reason: why, ports: len(tcp)})
			continue
		}
		outside := 0
		for _, key := range tcp {
			port, _, _ := labels.SplitEgressPortKey(key)
			egressPort := recorded[key]
			if !ports.Contains(egressPort) {
				outside++
				continue
			}
			c := claim{svc: svc, route: Route{
				Cluster: l[labels.ClusterName],
				Dest:    Destination{Namespace: svc.Namespace, Service: l[labels.RemoteService], Host: l[labels.RemoteHostname], Port: port},
				Mirror:  name,
			}}
			c.corroborated = svc.UID != "" && owned[corroborationKey(svc.Namespace, svc.Name, string(svc.UID), egressPort)]
			byPort[egressPort] = append(byPort[egressPort], c)
		}
		if outside > 0 {
			ignored = append(ignored, ignoredClaim{mirror: name, reason: ignoredRange, ports: outside})
		}
	}
	tab := routeTable{routes: map[int32]Route{}, conflicts: map[int32][]string{}, ignored: ignored}
	for p, claims := range byPort {
		slices.SortFunc(claims, claim.compare)
		tab.routes[p] = claims[0].route
		if len(claims) > 1 {
			names := make([]string, len(claims))
			for i, c := range claims {
				names[i] = c.route.Mirror
			}
			tab.conflicts[p] = names
		}
	}
	slices.SortFunc(tab.ignored, func(a, b ignoredClaim) int {
		return cmp.Or(cmp.Compare(a.mirror, b.mirror), cmp.Compare(a.reason, b.reason))
	})
	return tab
}

// corroborations returns the set of (namespace, Service, UID, port) that
// the controller's EndpointSlices point at an egress port: a slice the
// controller wrote for that Service, owned by it.
func corroborations(eps []*discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, es := range eps {
		if es.DeletionTimestamp != nil || es.Labels[discoveryv1.LabelManagedBy] != labels.EndpointSliceManagedBy {
			continue
		}
		svc := es.Labels[discoveryv1.LabelServiceName]
		for _, ref := range es.OwnerReferences {
			if ref.Kind != "Service" || ref.APIVersion != "v1" || ref.Name != svc || ref.UID == "" {
				continue
			}
			for _, p := range es.Ports {
				if p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
					out[corroborationKey(es.Namespace, svc, string(ref.UID), *p.Port)] = true
				}
			}
		}
	}
	return out
}

func corroborationKey(ns, svc, uid string, port int32) string {
	return ns + "/" + svc + "/" + uid + "/" + strconv.Itoa(int(port))
}

package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Exports is the ingress's live view of what its own cluster exports:
// informers on the exported Services and on EndpointSlices. It answers
// which address a destination may be dialled at, never from DNS, by its
// EndpointPolicy; and it ends the established streams that a change no
// longer allows (trust_streams.go).
//
// A Service is exported two ways, each watched by an informer of its own
// (a label selector cannot say "this label or that one"): by the export
// selector (Linkerd's label, by default), and by the label the controller
// stamps on a Service a ServiceExport exports (labels.ServiceExportMode),
// whatever the export selector.
type Exports struct {
	// routes are the two ways, the export selector's first.
	routes []exportRoute
	policy EndpointPolicy
	guard  *streamGuard

	mu       sync.Mutex
	exported map[string]bool // the keys of the exported Services, for the gauge
}

// exportRoute is one way a Service is exported (remote.Way): the
// informers on the Services it selects and on their EndpointSlices, and
// its selector, checked again on every Service: a watch that does not
// filter (a fake, in tests) must not keep an object that stopped matching.
type exportRoute struct {
	services cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
	selector k8slabels.Selector
}

const bySvc = "service"

// NewExports watches, through client, the Services selected by selector
// and those stamped by a ServiceExport, and their EndpointSlices: only
// those, selected on the API server by the labels the EndpointSlice
// controller copies from their Service (remote.Way). A selector-less
// Service's hand-made slices must carry its export label to be seen.
func NewExports(client kubernetes.Interface, selector k8slabels.Selector) *Exports {
	ways := []remote.Way{remote.Selected(selector), remote.Stamped}
	var names []string
	for _, w := range ways {
		names = append(names, w.Name, w.SlicesName())
	}
	health := remote.NewHealth(localCluster, names, remote.Hooks{})
	trim := func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
			m.SetAnnotations(nil)
		}
		return obj, nil
	}
	informer := func(kind remote.Kind, sel k8slabels.Selector, w int, indexers cache.Indexers) cache.SharedIndexInformer {
		inf := cache.NewSharedIndexInformer(remote.ListWatch(client, kind, sel.String(), link.Namespaces{}, health, w), kind.Object(), 0, indexers)
		_ = inf.SetTransform(trim)
		return inf
	}
	e := &Exports{exported: map[string]bool{}}
	e.guard = newStreamGuard(e.stillAllowed)
	for i, w := range ways {
		r := exportRoute{
			services: informer(remote.Services, w.Services, 2*i, cache.Indexers{}),
			slices: informer(remote.EndpointSlices, w.Slices(), 2*i+1, cache.Indexers{bySvc: func(obj any) ([]string, error) {
				es := obj.(*discoveryv1.EndpointSlice)
				return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
			}}),
			selector: w.Services,
		}
		_, _ = r.services.AddEventHandler(remote.OnAny(func(o any) { e.count(objectKey(o)) }))
		e.guard.follow(r.slices, r.services)
		e.routes = append(e.routes, r)
	}
	return e
}

// localCluster names the gateway's own cluster in the metrics of what it
// watches (remote.Received).
const localCluster = "local"

// SetPolicy sets which endpoints may be dialled; call it before Run.
func (e *Exports) SetPolicy(p EndpointPolicy) { e.policy = p }

// Run starts the informers and waits until they have synced.
func (e *Exports) Run(ctx context.Context) error {
	for _, r := range e.routes {
		go r.services.Run(ctx.Done())
		go r.slices.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), e.HasSynced) {
		return fmt.Errorf("exported Services: informers did not sync: %w", ctx.Err())
	}
	logger := klog.FromContext(ctx).WithName("ingress")
	logger.Info("Endpoints dialled: Pods of the Service's namespace, from the EndpointSlice controller's slices; selector-less Services only when opted in",
		"selectorless", e.policy.Selectorless, "denyCIDRs", e.policy.Deny)
	go e.guard.run(ctx, logger, streamSweepInterval)
	return nil
}

// HasSynced reports whether the informers, of both ways of export and of
// the EndpointSlices, have synced.
func (e *Exports) HasSynced() bool {
	for _, r := range e.routes {
		if !r.services.HasSynced() || !r.slices.HasSynced() {
			return false
		}
	}
	return true
}

// service returns the exported Service of key (namespace/name): from the
// export selector's informer, or else from the ServiceExport's; nil when
// neither exports it.
func (e *Exports) service(key string) *corev1.Service {
	for _, r := range e.routes {
		obj, ok, _ := r.services.GetStore().GetByKey(key)
		if !ok {
			continue
		}
		if svc := obj.(*corev1.Service); r.selector.Matches(k8slabels.Set(svc.Labels)) {
			return svc
		}
	}
	return nil
}

// count sets the gauge of exported Services after an event on the Service
// key, from either informer. Each informer's store holds the change before
// its event is delivered, so the last event on a key counts it from both
// stores as they stand.
func (e *Exports) count(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.service(key) != nil {
		e.exported[key] = true
	} else {
		delete(e.exported, key)
	}
	exportedServices.Set(float64(len(e.exported)))
}

// Resolve returns the address to dial for d, or why it may not be dialled.
func (e *Exports) Resolve(d Destination) (netip.AddrPort, Reason) {
	svc := e.service(serviceKey(d))
	if svc == nil {
		return netip.AddrPort{}, ReasonNotExported
	}
	return resolve(svc, e.slicesOf(d), d, rand.IntN, &e.policy)
}

// slicesOf returns the EndpointSlices of d's Service, from every way that
// holds them, each once.
func (e *Exports) slicesOf(d Destination) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, r := range e.routes {
		objs, _ := r.slices.GetIndexer().ByIndex(bySvc, d.Namespace+"/"+d.Service)
		for _, o := range objs {
			es := o.(*discoveryv1.EndpointSlice)
			if !slices.ContainsFunc(out, func(x *discoveryv1.EndpointSlice) bool { return x.UID == es.UID && x.Name == es.Name }) {
				out = append(out, es)
			}
		}
	}
	return out
}

// stillAllowed returns the targets an established stream for d may still
// be carried to, whatever their readiness, or why d is no longer a
// destination (streamNotExported).
func (e *Exports) stillAllowed(d Destination) (map[netip.AddrPort]bool, string) {
	svc := e.service(serviceKey(d))
	if svc == nil {
		return nil, streamNotExported
	}
	all, _, reason := endpoints(svc, e.slicesOf(d), d, &e.policy, nil)
	if reason != "" {
		return nil, streamNotExported
	}
	out := make(map[netip.AddrPort]bool, len(all))
	for _, t := range all {
		out[t] = true
	}
	return out, ""
}

// resolve decides, from a Service and its EndpointSlices, where d goes: a
// ready endpoint that policy allows, chosen by pick among all of them for a
// Service, or the endpoint with d's hostname for a pod. It is pure, for
// tests without a client.
func resolve(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, d Destination, pick func(int) int, policy *EndpointPolicy) (netip.AddrPort, Reason) {
	_, candidates, reason := endpoints(svc, slices, d, policy, func(why string) { endpointsRefused.WithLabelValues(why).Inc() })
	if reason != "" {
		return netip.AddrPort{}, reason
	}
	if len(candidates) == 0 {
		return netip.AddrPort{}, ReasonNoEndpoint
	}
	return candidates[pick(len(candidates))], ""
}

// endpoints returns the endpoints of d that policy allows: all of them,
// whatever their readiness, and the ready ones (or all, when the Service
// publishes not-ready addresses); or why d is not a destination at all.
// refused, when set, is told of each endpoint policy refuses.
func endpoints(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, d Destination, policy *EndpointPolicy, refused func(string)) (all, ready []netip.AddrPort, _ Reason) {
	if svc == nil || labels.ExportMode(svc.Labels) != labels.Gateway || svc.Labels[labels.MirroredService] != "" {
		return nil, nil, ReasonNotExported
	}
	var sp *corev1.ServicePort
	for i, p := range svc.Spec.Ports {
		if p.Port == d.Port && (p.Protocol == corev1.ProtocolTCP || p.Protocol == "") {
			sp = &svc.Spec.Ports[i]
			break
		}
	}
	if sp == nil {
		return nil, nil, ReasonPortNotExposed
	}
	if d.Host != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil, nil, ReasonPodNotExported
	}
	hostSeen := false
	for _, es := range slices {
		port, ok := slicePort(es, sp.Name)
		if !ok {
			continue
		}
		for i := range es.Endpoints {
			ep := &es.Endpoints[i]
			if d.Host != "" {
				if ep.Hostname == nil || *ep.Hostname != d.Host {
					continue
				}
				hostSeen = true
			}
			if len(ep.Addresses) == 0 {
				continue
			}
			addr, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				continue
			}
			if why := policy.Refusal(svc, es, ep, addr); why != "" {
				if refused != nil {
					refused(why)
				}
				continue
			}
			ap := netip.AddrPortFrom(addr.Unmap(), uint16(port))
			all = append(all, ap)
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready || svc.Spec.PublishNotReadyAddresses {
				ready = append(ready, ap)
			}
		}
	}
	if d.Host != "" && !hostSeen {
		return nil, nil, ReasonPodNotExported
	}
	return all, ready, ""
}

// slicePort returns the port of an EndpointSlice named like the Service
// port (the EndpointSlice controller names them so; a single unnamed port
// has the empty name).
func slicePort(es *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range es.Ports {
		n := ""
		if p.Name != nil {
			n = *p.Name
		}
		if n == name && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
			return *p.Port, true
		}
	}
	return 0, false
}

// Package object holds the trimmed objects the informers store, in place of
// the API's: DNS needs a few fields of each Service and EndpointSlice, and a
// remote cluster may have many of them. Memory per stored object is a
// decision, made here. The watch stores them, the index reads them.
package object

import (
	"slices"
	"strings"
	"time"

	kobject "github.com/coredns/coredns/plugin/kubernetes/object"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Meta is the part of ObjectMeta the informers need to key an object.
type Meta struct {
	Name      string
	Namespace string
	Version   string // resourceVersion

	*kobject.Empty // the rest of metav1.Object, as no-ops
}

// GetNamespace implements the metav1.Object interface.
func (m *Meta) GetNamespace() string { return m.Namespace }

// SetNamespace implements the metav1.Object interface.
func (m *Meta) SetNamespace(string) {}

// GetName implements the metav1.Object interface.
func (m *Meta) GetName() string { return m.Name }

// SetName implements the metav1.Object interface.
func (m *Meta) SetName(string) {}

// GetResourceVersion implements the metav1.Object interface.
func (m *Meta) GetResourceVersion() string { return m.Version }

// SetResourceVersion implements the metav1.Object interface.
func (m *Meta) SetResourceVersion(string) {}

// Port is a Service or EndpointSlice port.
type Port struct {
	Name     string
	Protocol string // lowercased, as in _<port>._<proto> names: tcp, udp, sctp
	Port     int32
}

// Service is an exported Service, trimmed to what DNS needs.
type Service struct {
	Meta
	// Exported is whether the Service matches the selector of the watch
	// that holds it: the export selector, the ServiceExport stamp's, or
	// the federated members'.
	// The API server only sends those, but a watch that does not filter
	// (a fake clientset's) must not export everything.
	Exported   bool
	Mode       labels.Mode
	Headless   bool
	ClusterIPs []string
	Ports      []Port
	// PublishNotReady makes not-ready endpoints count as ready, as the
	// Service's publishNotReadyAddresses asks.
	PublishNotReady bool
	// ExternalName Services have no addresses to export.
	ExternalName bool
}

// DeepCopyObject implements the runtime.Object interface.
func (s *Service) DeepCopyObject() runtime.Object {
	c := *s
	c.ClusterIPs = slices.Clone(s.ClusterIPs)
	c.Ports = slices.Clone(s.Ports)
	return &c
}

// Mirror is a local mirror Service, trimmed to what DNS needs.
type Mirror struct {
	Meta
	// IsMirror is whether the Service carries the mirror label; see
	// Service.Exported for why it is checked again.
	IsMirror bool
	// Cluster is the remote cluster it mirrors (mirror.linkerd.io/cluster-name).
	Cluster string
	// HeadlessOf names the headless mirror a per-pod mirror belongs to
	// (mirror.linkerd.io/headless-mirror-svc-name); empty otherwise.
	HeadlessOf string
	Headless   bool
	ClusterIPs []string
	Ports      []Port
	// Fed is, on a federated Service (<svc>-federated, without Cluster),
	// the members its annotations list; nil on any other.
	Fed *Federation
	// Export is, on a Service mirror the mcmirror controller made
	// (<svc>-<cluster>, labelled with the remote Service), the remote
	// Service as DNS in import mode answers it: its name, mode, ports,
	// whether it is headless and publishes not-ready addresses. Nil on
	// any other.
	Export *Service
}

// DeepCopyObject implements the runtime.Object interface.
func (m *Mirror) DeepCopyObject() runtime.Object {
	c := *m
	c.ClusterIPs = slices.Clone(m.ClusterIPs)
	c.Ports = slices.Clone(m.Ports)
	if m.Export != nil {
		c.Export = m.Export.DeepCopyObject().(*Service)
	}
	if m.Fed != nil {
		c.Fed = &Federation{Remote: slices.Clone(m.Fed.Remote), Local: m.Fed.Local}
	}
	return &c
}

// Slice is an EndpointSlice, trimmed to what DNS needs.
type Slice struct {
	Meta
	Service string // the kubernetes.io/service-name label
	// Remote is, on a mirror's slice, the remote Service it stands for
	// (mcmirror.dev/remote-service); empty on any other (ToMirrorSlice).
	Remote    string
	Ports     []Port
	Endpoints []Endpoint
	// TriggerTime is the last-change-trigger-time annotation, used for the
	// programming latency metric; zero when absent.
	TriggerTime time.Time
}

// Endpoint is an endpoint of a Slice.
type Endpoint struct {
	Addresses []string
	Hostname  string
	// Ready is the endpoint's ready condition, nil (unknown) counting as
	// ready as the API asks.
	Ready bool
}

// DeepCopyObject implements the runtime.Object interface.
func (s *Slice) DeepCopyObject() runtime.Object {
	c := *s
	c.Ports = slices.Clone(s.Ports)
	c.Endpoints = make([]Endpoint, len(s.Endpoints))
	for i, e := range s.Endpoints {
		c.Endpoints[i] = Endpoint{Addresses: slices.Clone(e.Addresses), Hostname: e.Hostname, Ready: e.Ready}
	}
	return &c
}

// ToService trims a Service; trimmed objects and tombstones pass through.
func ToService(obj any) (any, error) {
	switch s := obj.(type) {
	case *Service:
		return s, nil // already trimmed: transforms must be idempotent
	case *corev1.Service:
		t := &Service{
			Meta:            Meta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion},
			Exported:        true,
			Mode:            labels.ExportMode(s.Labels),
			Headless:        s.Spec.ClusterIP == corev1.ClusterIPNone,
			ClusterIPs:      clusterIPs(&s.Spec),
			Ports:           servicePorts(s.Spec.Ports),
			PublishNotReady: s.Spec.PublishNotReadyAddresses,
			ExternalName:    s.Spec.Type == corev1.ServiceTypeExternalName,
		}
		return t, nil
	}
	return obj, nil // tombstones and the like pass through
}

// ToMirror trims a local mirror Service, with the remote Service it
// stands for (Mirror.Export), which import mode answers from.
func ToMirror(obj any) (any, error) { return toMirror(obj, true) }

// ToMirrorWithoutExport trims a local mirror Service as ToMirror does but
// leaves Mirror.Export nil: direct mode answers a linked cluster from its
// own Services, and holds no second copy of each.
func ToMirrorWithoutExport(obj any) (any, error) { return toMirror(obj, false) }

func toMirror(obj any, withExport bool) (any, error) {
	switch s := obj.(type) {
	case *Mirror:
		return s, nil
	case *corev1.Service:
		m := &Mirror{
			Meta:       Meta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion},
			IsMirror:   s.Labels[labels.MirroredService] == labels.MirroredServiceValue,
			Cluster:    s.Labels[labels.ClusterName],
			HeadlessOf: s.Labels[labels.HeadlessMirrorSvcName],
			Headless:   s.Spec.ClusterIP == corev1.ClusterIPNone,
			ClusterIPs: clusterIPs(&s.Spec),
			Ports:      servicePorts(s.Spec.Ports),
			Fed:        federation(s),
		}
		if withExport {
			m.Export = export(m, s)
		}
		return m, nil
	}
	return obj, nil
}

// export is the remote Service a Service mirror of the controller stands
// for, as its labels and annotations say (Mirror.Export); nil for any
// other Service. The mirror is headless when the remote is, in gateway
// mode, unless the remote's endpoints have no hostname; a flat-mode mirror
// always is, and says what the remote is in the RemoteHeadless annotation.
func export(m *Mirror, s *corev1.Service) *Service {
	remote := s.Labels[labels.RemoteService]
	if !m.IsMirror || m.Cluster == "" || m.HeadlessOf != "" || remote == "" || s.Labels[labels.ManagedBy] != labels.ManagedByValue {
		return nil
	}
	mode := labels.Gateway
	if s.Labels[labels.ModeLabel] == labels.ModeFlat {
		mode = labels.Flat
	}
	return &Service{
		Meta:            Meta{Name: remote, Namespace: s.Namespace, Version: s.ResourceVersion},
		Exported:        true,
		Mode:            mode,
		Headless:        s.Annotations[labels.RemoteHeadless] == "true" || mode == labels.Gateway && m.Headless,
		Ports:           m.Ports,
		PublishNotReady: s.Spec.PublishNotReadyAddresses,
	}
}

// ToMirrorSlice trims an EndpointSlice of a mirror (ToSlice), keeping the
// remote Service it stands for (Slice.Remote).
func ToMirrorSlice(obj any) (any, error) {
	es, ok := obj.(*discovery.EndpointSlice)
	t, err := ToSlice(obj)
	if s, isSlice := t.(*Slice); ok && isSlice {
		s.Remote = es.Labels[labels.RemoteService]
	}
	return t, err
}

// ToSlice trims an EndpointSlice.
func ToSlice(obj any) (any, error) {
	switch s := obj.(type) {
	case *Slice:
		return s, nil
	case *discovery.EndpointSlice:
		t := &Slice{
			Meta:    Meta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion},
			Service: s.Labels[labels.ServiceName],
		}
		if s.AddressType == discovery.AddressTypeFQDN {
			return t, nil // names, not addresses: nothing to answer
		}
		if v, ok := s.Annotations[labels.EndpointsLastChangeTriggerTime]; ok {
			// A bad value only costs a latency sample: an error here
			// would stall the informer.
			if tt, err := time.Parse(time.RFC3339Nano, v); err == nil {
				t.TriggerTime = tt
			}
		}
		if len(s.Ports) > 0 {
			t.Ports = make([]Port, 0, len(s.Ports))
			for _, p := range s.Ports {
				if p.Port == nil {
					continue // "all ports": nothing to put in an SRV record
				}
				port := Port{Port: *p.Port, Protocol: "tcp"}
				if p.Name != nil {
					port.Name = *p.Name
				}
				if p.Protocol != nil {
					port.Protocol = strings.ToLower(string(*p.Protocol))
				}
				t.Ports = append(t.Ports, port)
			}
		}
		t.Endpoints = make([]Endpoint, 0, len(s.Endpoints))
		for _, e := range s.Endpoints {
			ep := Endpoint{Addresses: slices.Clone(e.Addresses), Ready: e.Conditions.Ready == nil || *e.Conditions.Ready}
			if e.Hostname != nil {
				ep.Hostname = strings.ToLower(*e.Hostname)
			}
			t.Endpoints = append(t.Endpoints, ep)
		}
		return t, nil
	}
	return obj, nil
}

func clusterIPs(spec *corev1.ServiceSpec) []string {
	if spec.ClusterIP == corev1.ClusterIPNone || spec.ClusterIP == "" {
		return nil
	}
	if len(spec.ClusterIPs) > 0 {
		return slices.Clone(spec.ClusterIPs)
	}
	return []string{spec.ClusterIP}
}

func servicePorts(ps []corev1.ServicePort) []Port {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Port, len(ps))
	for i, p := range ps {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		out[i] = Port{Name: p.Name, Protocol: proto, Port: p.Port}
	}
	return out
}

// Version returns the resourceVersion of a stored object; "" for one
// without (a tombstone).
func Version(obj any) string {
	if v, ok := obj.(interface{ GetResourceVersion() string }); ok {
		return v.GetResourceVersion()
	}
	return ""
}

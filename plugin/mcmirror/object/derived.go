package object

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The derived Services: for every Service exported by at least one cluster,
// the controller keeps in this cluster a Service derived-<hash> labelled
// with the ServiceImport it stands for (labels.ServiceImport) and its own
// managed-by label. It is a ClusterIP Service for a ClusterSetIP import (its
// ClusterIPs are the ClusterSetIPs) and a headless one for a Headless
// import. The clusterset zones answer from it, and from the exported
// Services the index already holds: the plugin reads no ServiceImport, and
// needs no permission beyond listing and watching Services.

// Derived is a derived Service, trimmed to what DNS needs.
type Derived struct {
	Meta
	// Import is the ServiceImport's name (labels.ServiceImport): the
	// exported Service's, in the same namespace.
	Import string
	// Managed is whether the controller made it (labels.ManagedBy); see
	// Service.Exported for why it is checked again.
	Managed    bool
	Headless   bool
	ClusterIPs []string
	Ports      []Port
}

// DeepCopyObject implements the runtime.Object interface.
func (d *Derived) DeepCopyObject() runtime.Object {
	c := *d
	c.ClusterIPs = slices.Clone(d.ClusterIPs)
	c.Ports = slices.Clone(d.Ports)
	return &c
}

// ToDerived trims a derived Service.
func ToDerived(obj any) (any, error) {
	switch s := obj.(type) {
	case *Derived:
		return s, nil
	case *corev1.Service:
		return &Derived{
			Meta:       Meta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion},
			Import:     s.Labels[labels.ServiceImport],
			Managed:    s.Labels[labels.ManagedBy] == labels.ManagedByValue,
			Headless:   s.Spec.ClusterIP == corev1.ClusterIPNone,
			ClusterIPs: clusterIPs(&s.Spec),
			Ports:      servicePorts(s.Spec.Ports),
		}, nil
	}
	return obj, nil
}

// Package remotetest has what the tests of a cluster's watchers need: a
// fake clientset whose EndpointSlices carry their Service's labels, as
// the EndpointSlice controller writes them, so that the watches of a way
// of export (remote.Way.Slices) select them.
package remotetest

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	servicesGVR = corev1.SchemeGroupVersion.WithResource("services")
	slicesGVR   = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
)

// NewClientset is fake.NewClientset, with the EndpointSlice controller's
// labels: a slice of a Service carries the Service's labels (among objs,
// and when written later), and a Service's labels are copied onto its
// slices when it is updated. The objects among objs are labelled in place,
// so that a test's later update of one keeps them.
func NewClientset(objs ...runtime.Object) *fake.Clientset {
	svcs := map[string]map[string]string{}
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			svcs[s.Namespace+"/"+s.Name] = s.Labels
		}
	}
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			if l, ok := svcs[es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName]]; ok {
				es.Labels = SliceLabels(l, es.Labels)
			}
		}
	}
	cs := fake.NewClientset(objs...)
	label := func(a k8stesting.Action) (bool, runtime.Object, error) {
		// A create or an update.
		if es, ok := a.(interface{ GetObject() runtime.Object }).GetObject().(*discoveryv1.EndpointSlice); ok {
			if svc, err := cs.Tracker().Get(servicesGVR, es.Namespace, es.Labels[discoveryv1.LabelServiceName]); err == nil {
				es.Labels = SliceLabels(svc.(*corev1.Service).Labels, es.Labels)
			}
		}
		return false, nil, nil
	}
	cs.PrependReactor("create", "endpointslices", label)
	cs.PrependReactor("update", "endpointslices", label)
	cs.PrependReactor("update", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.Service)
		if !ok {
			return false, nil, nil
		}
		if err := cs.Tracker().Update(servicesGVR, svc, svc.Namespace); err != nil {
			return true, nil, err
		}
		Relabel(cs, svc)
		obj, err := cs.Tracker().Get(servicesGVR, svc.Namespace, svc.Name)
		return true, obj, err
	})
	return cs
}

// Relabel copies the labels of svc onto its slices in cs, as the
// EndpointSlice controller does when a Service's labels change.
func Relabel(cs *fake.Clientset, svc *corev1.Service) {
	l, err := cs.Tracker().List(slicesGVR, discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), svc.Namespace)
	if err != nil {
		return
	}
	var all []*discoveryv1.EndpointSlice
	for i := range l.(*discoveryv1.EndpointSliceList).Items {
		all = append(all, &l.(*discoveryv1.EndpointSliceList).Items[i])
	}
	for _, es := range Relabeled(svc, all) {
		_ = cs.Tracker().Update(slicesGVR, es, es.Namespace)
	}
}

// RelabelAll is Relabel for every Service of cs: what the EndpointSlice
// controller has done once objects written straight into the tracker
// settle.
func RelabelAll(cs *fake.Clientset) error {
	l, err := cs.Tracker().List(servicesGVR, corev1.SchemeGroupVersion.WithKind("Service"), "")
	if err != nil {
		return err
	}
	for i := range l.(*corev1.ServiceList).Items {
		Relabel(cs, &l.(*corev1.ServiceList).Items[i])
	}
	return nil
}

// Relabeled returns the slices among slices that belong to Service svc
// and do not carry the labels the EndpointSlice controller gives them,
// each a copy with those labels.
func Relabeled(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, es := range slices {
		if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if want := SliceLabels(svc.Labels, es.Labels); !maps.Equal(want, es.Labels) {
			es = es.DeepCopy()
			es.Labels = want
			out = append(out, es)
		}
	}
	return out
}

// SliceLabels are the labels the EndpointSlice controller gives a slice of
// a Service labelled svc: the Service's, and the slice's own keys.
func SliceLabels(svc, slice map[string]string) map[string]string {
	out := maps.Clone(svc)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range []string{discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy} {
		if v, ok := slice[k]; ok {
			out[k] = v
		}
	}
	return out
}

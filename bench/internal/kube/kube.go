// Package kube holds what the benchmark commands write to their clusters
// the same way: namespaces, and headless Services with a hand-made
// EndpointSlice of named ready endpoints.
package kube

import (
	"context"
	"fmt"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// FastClient is a client of config without client-side rate limiting: the
// data sets are tens of thousands of objects.
func FastClient(config *rest.Config) kubernetes.Interface {
	rc := rest.CopyConfig(config)
	rc.QPS, rc.RateLimiter = -1, nil // negative: no client-side limit
	return kubernetes.NewForConfigOrDie(rc)
}

// Namespace creates namespace name, unless it exists.
func Namespace(cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Endpoint is one named ready endpoint.
type Endpoint struct{ Host, IP string }

// Headless creates the headless Service ns/name labelled lbl (one port,
// http 80) and then its EndpointSlice (Slice); either may exist already.
func Headless(ctx context.Context, cs kubernetes.Interface, ns, name, managedBy string,
	lbl map[string]string, eps []Endpoint) error {
	_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	sl := Slice(ns, name, managedBy, lbl, eps)
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("slice %s/%s: %w", ns, name, err)
	}
	return nil
}

// Slice is the EndpointSlice <svc>-0 of selector-less Service svc labelled
// lbl: written by hand, it carries the Service's labels itself, as the
// EndpointSlice controller's slices do, so that the watches of exported
// slices select it.
func Slice(ns, svc, managedBy string, lbl map[string]string, eps []Endpoint) *discoveryv1.EndpointSlice {
	l := remotetest.SliceLabels(lbl, map[string]string{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy,
	})
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-0", Namespace: ns, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(80)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.IP},
			Hostname:   ptr.To(e.Host),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s
}

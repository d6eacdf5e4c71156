// Package watchtest has what the tests of the watches and of the handler
// that run real watches share: the API objects a cluster holds, and the
// wait for an event with its bound.
package watchtest

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Labels of an exported Service: gateway or flat mode, by Linkerd's label.
var (
	ExportedGateway = map[string]string{labels.Exported: labels.ExportGateway}
	ExportedFlat    = map[string]string{labels.Exported: labels.ExportFlat}
)

// Service returns Service default/name.
func Service(name string, lbls map[string]string, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
	}
}

// MirrorService returns the local mirror default/name of a Service of
// cluster, or, with headlessOf, the per-pod mirror of one of its pods.
func MirrorService(name, cluster, headlessOf, clusterIP string) *corev1.Service {
	l := map[string]string{labels.MirroredService: "true", labels.ClusterName: cluster}
	if headlessOf != "" {
		l[labels.HeadlessMirrorSvcName] = headlessOf
	}
	return Service(name, l, clusterIP, corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
}

// FedService returns the local federated Service default/name as Linkerd's
// service mirror makes it: a mirror without a cluster name, with a
// ClusterIP, whose annotations list the members remote (<svc>@<cluster>,...)
// and local; an annotation is left out when its value is "-".
func FedService(name, remote, local string) *corev1.Service {
	ann := map[string]string{}
	if remote != "-" {
		ann[labels.RemoteDiscoveryAnnotation] = remote
	}
	if local != "-" {
		ann[labels.LocalDiscoveryAnnotation] = local
	}
	s := Service(name, map[string]string{labels.MirroredService: labels.MirroredServiceValue}, "10.96.9.9",
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
	s.Annotations = ann
	return s
}

// EndpointSlice returns EndpointSlice default/name of Service svc, port
// http/80.
func EndpointSlice(name, svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{labels.ServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

// PodEndpoint returns the endpoint of a pod.
func PodEndpoint(host, ip string, ready bool) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, Hostname: ptr.To(host), Conditions: discovery.EndpointConditions{Ready: ptr.To(ready)}}
}

// FlatSlice returns EndpointSlice default/name of Service svc: a ready
// endpoint without hostname at each of ips.
func FlatSlice(name, svc string, ips ...string) *discovery.EndpointSlice {
	s := EndpointSlice(name, svc)
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, PodEndpoint("", ip, true))
	}
	return s
}

// EventBound is how long a test waits for something the code under test
// does in milliseconds (an informer syncs, an event reaches the index, a
// refused connection is counted) before it fails: a machine at load 4,
// under -race, meets it by far, so that a test fails only when the event
// never comes. The tests wait for events, not for this clock; a bound on
// how fast the code is belongs to the benchmarks.
const EventBound = 30 * time.Second

// WaitFor polls f until it holds, failing t after d.
func WaitFor(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

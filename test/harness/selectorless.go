package harness

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
)

// PodAddr is an endpoint of a SelectorlessService: the pod it stands for
// (its targetRef) and its address.
type PodAddr struct {
	Name, IP string
}

// PodAddrs are the names and addresses of pods.
func PodAddrs(pods []*Pod) []PodAddr {
	out := make([]PodAddr, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodAddr{Name: p.Name, IP: p.IP.String()})
	}
	return out
}

// SelectorlessService describes a Service with no selector whose
// EndpointSlice a test writes in the EndpointSlice controller's place:
// endpoints that are RunPod's servers, or addresses of the test's own,
// where no kube-controller-manager runs.
type SelectorlessService struct {
	// Labels of the Service: how it is exported, if it is.
	Labels map[string]string
	// Headless Services name each endpoint by its pod.
	Headless bool
	// Port is the Service's port, named "http", TCP; TargetPort the
	// endpoints'.
	Port, TargetPort int32
	// Endpoints, each ready, serving and not terminating.
	Endpoints []PodAddr
}

// CreateSelectorless creates in c the Service ns/name that s describes and
// its EndpointSlice <name>-pods; both are deleted when t ends.
func (c *Cluster) CreateSelectorless(t testing.TB, ns, name string, s SelectorlessService) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: s.Labels},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: s.Port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(s.TargetPort),
		}}},
	}
	if s.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	_, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	es := &discoveryv1.EndpointSlice{
		// Written by hand, it carries the Service's labels itself, as a
		// selector-less Service's slices must to be seen by the watches of
		// exported slices.
		ObjectMeta: metav1.ObjectMeta{Name: name + "-pods", Namespace: ns, Labels: remotetest.SliceLabels(s.Labels, map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "e2e.mcmirror.dev",
		})},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(s.TargetPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, p := range s.Endpoints {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{p.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name},
		}
		if s.Headless {
			ep.Hostname = ptr.To(p.Name)
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	_, err = c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), es.Name, metav1.DeleteOptions{})
	})
}

package controller

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// mirrorLabels are the labels the controller puts on a mirror of
// cluster/namespace/svc.
func mirrorLabels(cluster, svc string) map[string]string {
	return map[string]string{labels.MirroredService: "true", labels.ClusterName: cluster, labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: svc}
}

// Labels alone do not make an object the controller's: its name must be
// the one the controller gives it.
func TestOwnedKey(t *testing.T) {
	svc := func(name string, l map[string]string) metav1.Object {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: l}}
	}
	pod := mirrorLabels("west", "db")
	pod[labels.RemoteHostname] = "db-0"
	slice := func(name, svc, managedBy string) metav1.Object {
		l := mirrorLabels("west", "web")
		l[discoveryv1.LabelServiceName] = svc
		l[discoveryv1.LabelManagedBy] = managedBy
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: l}}
	}
	for _, tc := range []struct {
		name string
		obj  metav1.Object
		key  string // "" when not the controller's
	}{
		{"a Service mirror", svc("web-west", mirrorLabels("west", "web")), "west/shop/web"},
		{"a per-pod mirror", svc("db-0-west", pod), "west/shop/db"},
		{"the labels of a mirror on a Service named otherwise", svc("innocent", mirrorLabels("west", "web")), ""},
		{"named for another cluster", svc("web-paris", mirrorLabels("west", "web")), ""},
		{"a per-pod mirror's labels, named as the Service mirror", svc("db-west", pod), ""},
		{"no managed-by", svc("web-west", map[string]string{labels.ClusterName: "west", labels.RemoteService: "web"}), ""},
		{"the controller's EndpointSlice", slice("web-west", "web-west", labels.EndpointSliceManagedBy), "west/shop/web"},
		{"the controller's second EndpointSlice", slice("web-west.1", "web-west", labels.EndpointSliceManagedBy), "west/shop/web"},
		{"an EndpointSlice of another manager", slice("web-west", "web-west", labels.EndpointSliceControllerName), ""},
		{"an EndpointSlice named otherwise", slice("web-west-x1", "web-west", labels.EndpointSliceManagedBy), ""},
		{"an EndpointSlice of a Service of no such cluster", slice("web", "web", labels.EndpointSliceManagedBy), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, owned := ownedKey(tc.obj)
			assert.Equal(t, tc.key != "", owned)
			assert.Equal(t, tc.key, key)
		})
	}
}

// A Service that anyone who may write Services labelled as a mirror (here
// with the key of a real export, and the egress port the real mirror will
// get) is not the controller's: its port is not claimed at start-up, the
// real mirror gets the port, and the foreign Service is neither updated
// nor deleted by the sync.
func TestForgedLabelsDoNotMakeAServiceTheControllers(t *testing.T) {
	forged := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "innocent",
		Labels:      mirrorLabels("west", "web"),
		Annotations: map[string]string{labels.EgressPorts: "80/TCP=30000"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{forged}},
		west(exported("default", "web", "true", false, tcp("http", 80))))

	_, claimed := f.c.ports.Owner(30000)
	assert.False(t, claimed, "the forged Service's port is not claimed at start-up")
	writes := f.converge("west/default/web")
	assert.NotContains(t, writes, "delete services innocent")
	assert.NotContains(t, writes, "update services innocent")

	real := f.service("default", "web-west")
	require.NotNil(t, real)
	assert.Equal(t, "80/TCP=30000", real.Annotations[labels.EgressPorts], "the real mirror gets the first port of the range")
	left := f.service("default", "innocent")
	require.NotNil(t, left, "the foreign Service is left alone")
	assert.Equal(t, forged.Labels, left.Labels)
	assert.Equal(t, forged.Annotations, left.Annotations)
}

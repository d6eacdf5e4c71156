package controller

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A flat-mode mirror gets, with FlatEndpoints, one copy of each remote
// EndpointSlice: what DNS in import mode answers from. The copies are
// headless (kube-proxy never receives them) and labelled as copies (the
// kubernetes plugin of a DNS in import mode holds none), keep hostnames, readiness,
// ports and the change time, and never an address the API server would
// refuse; FQDN slices are not copied. Without FlatEndpoints there are none.
func TestPlanFlatSlices(t *testing.T) {
	remote := exported("default", "db", "remote-discovery", true, tcp("http", 80))
	remote.Spec.PublishNotReadyAddresses = true
	es := endpoints("default", "db", "db-0", "db-1!", "")
	es.Annotations = map[string]string{labels.EndpointsLastChangeTriggerTime: "2026-11-27T16:00:00Z"}
	es.Endpoints[2].Addresses = []string{"169.254.169.254"} // the cloud's metadata service: left out
	fqdn := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}}}
	fqdn.Name, fqdn.Namespace = "db-fqdn", "default"

	p := planServices(planIn(remote, es, fqdn))
	require.Equal(t, shapeFlat, p.shape)
	main := p.wants[0].svc
	assert.Equal(t, "true", main.Annotations[labels.RemoteHeadless], "the remote is headless")
	assert.True(t, main.Spec.PublishNotReadyAddresses, "as the remote")

	in := sliceInput{cluster: "west", ns: "default", name: "db", plan: p, live: live(p), remoteSlices: []*discoveryv1.EndpointSlice{es, fqdn}}
	desired, known := planSlices(in)
	assert.Empty(t, desired, "no copies without FlatEndpoints")
	assert.True(t, known["db-west"], "so any copy left is garbage")

	in.flat = true
	desired, _ = planSlices(in)
	require.Len(t, desired, 1)
	got := desired["db-west.db-abcde"]
	require.NotNil(t, got)
	assert.Equal(t, "db-west", got.Labels[discoveryv1.LabelServiceName])
	assert.Equal(t, "west", got.Labels[labels.ClusterName])
	assert.Equal(t, "db", got.Labels[labels.RemoteService])
	assert.Contains(t, got.Labels, corev1.IsHeadlessService)
	assert.Equal(t, "true", got.Labels[labels.FlatEndpoints], "what the kubernetes plugin of a DNS in import mode does not select")
	assert.Equal(t, labels.EndpointSliceManagedBy, got.Labels[discoveryv1.LabelManagedBy])
	assert.Equal(t, "2026-11-27T16:00:00Z", got.Annotations[labels.EndpointsLastChangeTriggerTime])
	require.Len(t, got.Endpoints, 2)
	assert.Equal(t, []string{"10.201.0.1"}, got.Endpoints[0].Addresses)
	assert.Equal(t, "db-0", *got.Endpoints[0].Hostname)
	assert.True(t, *got.Endpoints[0].Conditions.Ready)
	assert.False(t, *got.Endpoints[1].Conditions.Ready)
	assert.Nil(t, got.Endpoints[0].TargetRef)
	require.Len(t, got.Ports, 1)
	assert.Equal(t, int32(80), *got.Ports[0].Port)

	remote.Spec.ClusterIP = "10.97.0.10"
	p = planServices(planIn(remote, es))
	assert.NotContains(t, p.wants[0].svc.Annotations, labels.RemoteHeadless, "a ClusterIP remote")
}

func TestFlatSliceName(t *testing.T) {
	assert.Equal(t, "db-west.db-abcde", flatSliceName("db-west", "db-abcde"))
	long := flatSliceName("db-west", string(make([]byte, 250)))
	assert.Len(t, long, len("db-west.")+20)
	assert.NotEqual(t, long, flatSliceName("db-west", string(make([]byte, 251))))
}

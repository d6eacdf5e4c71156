package object

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMirrorGroup(t *testing.T) {
	tests := []struct {
		m    Mirror
		want GroupKey
		ok   bool
	}{
		{Mirror{Meta: Meta{Name: "nginx-svc-west", Namespace: "ns"}, Cluster: "west"}, ServiceKey("ns", "nginx-svc"), true},
		{Mirror{Meta: Meta{Name: "nginx-set-0-west", Namespace: "ns"}, Cluster: "west", HeadlessOf: "nginx-svc-west"}, ServiceKey("ns", "nginx-svc"), true},
		{Mirror{Meta: Meta{Name: "svc-us-west", Namespace: "ns"}, Cluster: "us-west"}, ServiceKey("ns", "svc"), true},
		{Mirror{Meta: Meta{Name: "nginx-svc-west", Namespace: "ns"}}, GroupKey{}, false},             // no cluster label
		{Mirror{Meta: Meta{Name: "nginx-svc", Namespace: "ns"}, Cluster: "west"}, GroupKey{}, false}, // not <svc>-<cluster>
	}
	for _, tc := range tests {
		got, ok := MirrorGroup(&tc.m)
		assert.False(t, got != tc.want || ok != tc.ok,
			"MirrorGroup(%s) = %v, %t; want %v, %t", tc.m.Name, got, ok, tc.want, tc.ok)
	}
}

// A federated Service's group is its own, not a cluster's mirror's.
func TestFederatedGroup(t *testing.T) {
	m, _ := ToMirror(fedService("web-federated", "web@west", "web"))
	k, ok := FederatedGroup(m.(*Mirror))
	assert.False(t, !ok || k != FederatedKey("default", "web-federated") || k.String() != "default/web-federated (federated)",
		"FederatedGroup = %v, %t", k, ok)
	_, ok = MirrorGroup(m.(*Mirror))
	assert.False(t, ok, "a federated Service counts as a cluster's mirror")
	name, ok := FederatedKey("default", "web-federated").Federated()
	assert.False(t, !ok || name != "web-federated", "Federated() = %q, %t", name, ok)
	_, ok = ServiceKey("default", "web").Federated()
	assert.False(t, ok, "a Service's key is a federated one")
}

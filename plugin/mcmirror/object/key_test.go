package object

import "testing"

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
		if got != tc.want || ok != tc.ok {
			t.Errorf("MirrorGroup(%s) = %v, %t; want %v, %t", tc.m.Name, got, ok, tc.want, tc.ok)
		}
	}
}

// A federated Service's group is its own, not a cluster's mirror's.
func TestFederatedGroup(t *testing.T) {
	m, _ := ToMirror(fedService("web-federated", "web@west", "web"))
	if k, ok := FederatedGroup(m.(*Mirror)); !ok || k != FederatedKey("default", "web-federated") || k.String() != "default/web-federated (federated)" {
		t.Errorf("FederatedGroup = %v, %t", k, ok)
	}
	if _, ok := MirrorGroup(m.(*Mirror)); ok {
		t.Error("a federated Service counts as a cluster's mirror")
	}
	if name, ok := FederatedKey("default", "web-federated").Federated(); !ok || name != "web-federated" {
		t.Errorf("Federated() = %q, %t", name, ok)
	}
	if _, ok := ServiceKey("default", "web").Federated(); ok {
		t.Error("a Service's key is a federated one")
	}
}

package gateway

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestRoutes(t *testing.T) {
	annotated := func(svc *corev1.Service, annotation string) *corev1.Service {
		svc.Annotations[labels.EgressPorts] = annotation
		return svc
	}
	notOwned := mirrorService("linkerd-west", "linkerd", "", map[int32]int32{80: 30009})
	notOwned.Labels[labels.ManagedBy] = "linkerd"
	noCluster := mirrorService("nocluster-west", "nocluster", "", map[int32]int32{80: 30010})
	delete(noCluster.Labels, labels.ClusterName)
	noRemote := mirrorService("noremote-west", "noremote", "", map[int32]int32{80: 30011})
	delete(noRemote.Labels, labels.RemoteService)
	paris := mirrorService("web-paris", "web", "", map[int32]int32{80: 30012})
	paris.Labels[labels.ClusterName] = "paris"

	for _, tc := range []struct {
		name      string
		mirrors   []*corev1.Service
		routes    map[int32]Route
		conflicts map[int32][]string
	}{
		{name: "none", routes: map[int32]Route{}, conflicts: map[int32][]string{}},
		{
			name:    "a Service and a pod, several ports, several clusters",
			mirrors: []*corev1.Service{mirrorService("web-west", "web", "", map[int32]int32{80: 30001, 443: 30002}), mirrorService("web-0-west", "web", "web-0", map[int32]int32{80: 30003}), paris},
			routes: map[int32]Route{
				30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-west"},
				30002: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 443}, Mirror: "default/web-west"},
				30003: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Host: "web-0", Port: 80}, Mirror: "default/web-0-west"},
				30012: {Cluster: "paris", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-paris"},
			},
			conflicts: map[int32][]string{},
		},
		{
			name:      "UDP and malformed entries skipped",
			mirrors:   []*corev1.Service{annotated(mirrorService("dns-west", "dns", "", nil), "53/UDP=30004,53/TCP=30005,80/SCTP=30006,x/TCP=30007,81/TCP=0,82/TCP=99999,garbage")},
			routes:    map[int32]Route{30005: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "dns", Port: 53}, Mirror: "default/dns-west"}},
			conflicts: map[int32][]string{},
		},
		{
			name:      "not the controller's, or incomplete: skipped",
			mirrors:   []*corev1.Service{notOwned, noCluster, noRemote},
			routes:    map[int32]Route{},
			conflicts: map[int32][]string{},
		},
		{
			name: "one port, two mirrors: neither served",
			mirrors: []*corev1.Service{
				mirrorService("web-west", "web", "", map[int32]int32{80: 30001, 443: 30002}),
				mirrorService("api-west", "api", "", map[int32]int32{8080: 30001}),
			},
			routes:    map[int32]Route{30002: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 443}, Mirror: "default/web-west"}},
			conflicts: map[int32][]string{30001: {"default/api-west", "default/web-west"}},
		},
		{
			name: "one port, three mirrors",
			mirrors: []*corev1.Service{
				mirrorService("c-west", "c", "", map[int32]int32{80: 30001}),
				mirrorService("a-west", "a", "", map[int32]int32{80: 30001}),
				mirrorService("b-west", "b", "", map[int32]int32{80: 30001}),
			},
			routes:    map[int32]Route{},
			conflicts: map[int32][]string{30001: {"default/a-west", "default/b-west", "default/c-west"}},
		},
		{
			name: "a UDP port does not conflict with a TCP one",
			mirrors: []*corev1.Service{
				mirrorService("web-west", "web", "", map[int32]int32{80: 30001}),
				annotated(mirrorService("dns-west", "dns", "", nil), "53/UDP=30001"),
			},
			routes:    map[int32]Route{30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-west"}},
			conflicts: map[int32][]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes, conflicts := Routes(tc.mirrors)
			assert.Equal(t, tc.routes, routes)
			assert.Equal(t, tc.conflicts, conflicts)
		})
	}
}

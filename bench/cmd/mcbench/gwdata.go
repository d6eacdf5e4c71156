package main

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// The gwt set (server Agw): gateway-mode exports answered with local mirror
// ClusterIPs. Service s<i> is a ClusterIP Service in each of c0..c9
// (mirror.linkerd.io/exported=true), and east holds its mirror s<i>-c<c>:
// a ClusterIP Service with the labels the controller writes
// (mirrored-service, cluster-name) and a ClusterIP the API server
// allocated. mcbench creates the mirrors itself, as the controller would,
// rather than running the controller for 10,000 of them; the new-export
// latency measures the controller's part.
//
// For a size of N it gives N mirror names (s<i>-c<c>, one address each)
// and N/10 Service names (s<i>-global, the 10 mirror ClusterIPs): the same
// counts as the ten set.
const nsGWT = "gwt"

// gwIPs holds the ClusterIP of each mirror, by "s<i>-c<c>", as the API
// server allocated it.
var gwIPs = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// loadGateway creates s<from>..s<to-1> of the gwt set: the exported Services
// in c0..c9 and their mirrors in east.
func loadGateway(env *harness.Env, from, to int) (int64, error) {
	cr := newCreator(env.Clusters(), 12)
	east := cr.clients["east"]
	for i := from; i < to; i++ {
		name := fmt.Sprintf("s%d", i)
		for c := range 10 {
			cluster := fmt.Sprintf("c%d", c)
			remote := cr.clients[cluster]
			cr.jobs <- func(ctx context.Context) error {
				_, err := remote.CoreV1().Services(nsGWT).Create(ctx, clusterIPService(nsGWT, name,
					map[string]string{labels.Exported: labels.ExportGateway, setLabel: nsGWT}), metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("%s: service %s/%s: %w", cluster, nsGWT, name, err)
				}
				mname, err := labels.MirrorName(name, cluster)
				if err != nil {
					return err
				}
				m, err := east.CoreV1().Services(nsGWT).Create(ctx, clusterIPService(nsGWT, mname, map[string]string{
					labels.MirroredService: labels.MirroredServiceValue,
					labels.ClusterName:     cluster,
				}), metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("east: mirror %s/%s: %w", nsGWT, mname, err)
				}
				if m.Spec.ClusterIP == "" || m.Spec.ClusterIP == corev1.ClusterIPNone {
					return fmt.Errorf("east: mirror %s/%s has no ClusterIP", nsGWT, mname)
				}
				gwIPs.Lock()
				gwIPs.m[mname] = m.Spec.ClusterIP
				gwIPs.Unlock()
				return nil
			}
		}
	}
	err := cr.wait()
	return cr.n.Load() * 2, err
}

func clusterIPService(ns, name string, lbl map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
}

// expectGateway returns the names of s0..s<n-1> of the gwt set and the
// mirror ClusterIPs they answer.
func expectGateway(n int) names {
	gwIPs.Lock()
	defer gwIPs.Unlock()
	return expect(n,
		func(i, c int) string { return fmt.Sprintf("s%d-c%d.%s.%s", i, c, nsGWT, zone) },
		func(i int) string { return fmt.Sprintf("s%d-global.%s.%s", i, nsGWT, zone) },
		func(i, c int) string { return gwIPs.m[fmt.Sprintf("s%d-c%d", i, c)] })
}

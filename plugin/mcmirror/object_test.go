package mcmirror

import (
	"reflect"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestServiceTransform(t *testing.T) {
	sel, _ := k8slabels.Parse(labels.DefaultExportSelector)
	tr := serviceTransform(sel)
	in := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "7",
			Labels:      map[string]string{labels.Exported: labels.ExportFlat},
			Annotations: map[string]string{"big": "annotation"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1", "fd00::1"},
			Ports:                    []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
			PublishNotReadyAddresses: true,
		},
	}
	out, err := tr(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &Service{
		objMeta: objMeta{Name: "web", Namespace: "default", Version: "7"}, Exported: true, Mode: labels.Flat,
		ClusterIPs: []string{"10.0.0.1", "fd00::1"},
		Ports:      []Port{{"http", "tcp", 80}, {"dns", "udp", 53}}, PublishNotReady: true,
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %+v\nwant %+v", out, want)
	}
	// Idempotent: a transform may see its own output again.
	if again, _ := tr(out); again != out {
		t.Error("transform of a trimmed Service made a new object")
	}
	// Keys work on the trimmed object.
	if k, err := cache.MetaNamespaceKeyFunc(out); err != nil || k != "default/web" {
		t.Errorf("key %q, %v", k, err)
	}
	if c := out.(*Service).DeepCopyObject().(*Service); !reflect.DeepEqual(c, want) || &c.Ports[0] == &want.Ports[0] {
		t.Error("DeepCopyObject is not a deep copy")
	}

	headless, _ := tr(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{"other": "x"}}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
	if h := headless.(*Service); !h.Headless || h.ClusterIPs != nil || h.Exported || h.Mode != labels.Gateway {
		t.Errorf("headless, unexported: %+v", h)
	}
	// Tombstones pass through.
	tomb := cache.DeletedFinalStateUnknown{Key: "a/b"}
	if got, _ := tr(tomb); got != tomb {
		t.Error("tombstone changed")
	}
}

func TestToMirror(t *testing.T) {
	out, err := toMirror(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx-set-0-west", Namespace: "default", Labels: map[string]string{
			labels.MirroredService: "true", labels.ClusterName: "west", labels.HeadlessMirrorSvcName: "nginx-svc-west"}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &Mirror{objMeta: objMeta{Name: "nginx-set-0-west", Namespace: "default"}, IsMirror: true, Cluster: "west",
		HeadlessOf: "nginx-svc-west", ClusterIPs: []string{"10.96.0.10"}, Ports: []Port{{"http", "tcp", 80}}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %+v\nwant %+v", out, want)
	}
}

func TestToSlice(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	in := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default",
			Labels:      map[string]string{labels.ServiceName: "web"},
			Annotations: map[string]string{labels.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("all")}, // no port: left out
		},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Hostname: ptr.To("DB-0")},                                                              // ready unknown: ready
			{Addresses: []string{"10.1.0.2"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(false)}, NodeName: ptr.To("n")}, // not ready
		},
	}
	out, err := toSlice(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &Slice{
		objMeta: objMeta{Name: "web-abc", Namespace: "default"}, Service: "web",
		Ports:       []Port{{"http", "tcp", 8080}},
		Endpoints:   []Endpoint{{Addresses: []string{"10.1.0.1"}, Hostname: "db-0", Ready: true}, {Addresses: []string{"10.1.0.2"}}},
		TriggerTime: at,
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %+v\nwant %+v", out, want)
	}

	// FQDN slices have no addresses to answer; bad annotations cost only
	// the latency sample.
	in.AddressType = discovery.AddressTypeFQDN
	if out, _ := toSlice(in); len(out.(*Slice).Endpoints) != 0 {
		t.Error("FQDN slice kept its endpoints")
	}
	in.AddressType = discovery.AddressTypeIPv6
	in.Annotations[labels.EndpointsLastChangeTriggerTime] = "yesterday"
	out, err = toSlice(in)
	if err != nil || !out.(*Slice).TriggerTime.IsZero() {
		t.Errorf("bad annotation: %v, %v", out, err)
	}
}

package object

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestToMirror(t *testing.T) {
	out, err := ToMirror(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx-set-0-west", Namespace: "default", Labels: map[string]string{
			labels.MirroredService: "true", labels.ClusterName: "west", labels.HeadlessMirrorSvcName: "nginx-svc-west"}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	})
	require.NoError(t, err)
	want := &Mirror{Meta: Meta{Name: "nginx-set-0-west", Namespace: "default"}, IsMirror: true, Cluster: "west",
		HeadlessOf: "nginx-svc-west", ClusterIPs: []string{"10.96.0.10"}, Ports: []Port{{"http", "tcp", 80}}}
	assert.Equal(t, want, out)
}

// TestToMirrorExport: a flat-mode mirror the controller wrote carries the
// export it stands for, which import mode answers from; direct mode's
// transform leaves it out and keeps the rest.
func TestToMirrorExport(t *testing.T) {
	in := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-west", Namespace: "default", ResourceVersion: "7",
			Labels: map[string]string{labels.MirroredService: "true", labels.ClusterName: "west",
				labels.RemoteService: "web", labels.ManagedBy: labels.ManagedByValue, labels.ModeLabel: labels.ModeFlat},
			Annotations: map[string]string{labels.RemoteHeadless: "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	full, err := ToMirror(in)
	require.NoError(t, err)
	wantExport := &Service{Meta: Meta{Name: "web", Namespace: "default", Version: "7"}, Exported: true, Mode: labels.Flat,
		Headless: true, Ports: []Port{{"http", "tcp", 80}}}
	assert.Equal(t, wantExport, full.(*Mirror).Export, "ToMirror: Export")
	bare, err := ToMirrorWithoutExport(in)
	require.NoError(t, err)
	want := *full.(*Mirror)
	want.Export = nil
	assert.Equal(t, &want, bare, "ToMirrorWithoutExport")
}

func TestToSlice(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	in := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default",
			Labels:      map[string]string{labels.ServiceName: "web"},
			Annotations: map[string]string{labels.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{
			{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)},
			{Name: new("all")}, // no port: left out
		},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Hostname: new("DB-0")},                                                           // ready unknown: ready
			{Addresses: []string{"10.1.0.2"}, Conditions: discovery.EndpointConditions{Ready: new(false)}, NodeName: new("n")}, // not ready
		},
	}
	out, err := ToSlice(in)
	require.NoError(t, err)
	want := &Slice{
		Meta: Meta{Name: "web-abc", Namespace: "default"}, Service: "web",
		Ports:       []Port{{"http", "tcp", 8080}},
		Endpoints:   []Endpoint{{Addresses: []string{"10.1.0.1"}, Hostname: "db-0", Ready: true}, {Addresses: []string{"10.1.0.2"}}},
		TriggerTime: at,
	}
	assert.Equal(t, want, out)

	// FQDN slices have no addresses to answer; bad annotations cost only
	// the latency sample.
	in.AddressType = discovery.AddressTypeFQDN
	out, _ = ToSlice(in)
	assert.Empty(t, out.(*Slice).Endpoints, "FQDN slice kept its endpoints")
	in.AddressType = discovery.AddressTypeIPv6
	in.Annotations[labels.EndpointsLastChangeTriggerTime] = "yesterday"
	out, err = ToSlice(in)
	assert.False(t, err != nil || !out.(*Slice).TriggerTime.IsZero(), "bad annotation: %v, %v", out, err)
}

var fedService = watchtest.FedService

// The members are read from the annotations; an entry that is not
// <svc>@<cluster> of two DNS labels is left out, and so is a second entry
// of a cluster. Only a mirror without a cluster name, named <svc>-federated,
// with either annotation, is a federated Service.
func TestFederationAnnotations(t *testing.T) {
	f := federation(fedService("web-federated", " web@west,,web,@west,web@,a@b@c,Web@paris,web@West,other@west, api@paris ", " web "))
	want := &Federation{Remote: []FedMember{{"web", "west"}, {"api", "paris"}}, Local: "web"}
	require.Equal(t, want, f, "federation")
	assert.Equal(t, []string{"web", "api"}, f.MemberNames(), "MemberNames")
	f = federation(fedService("web-federated", "-", "web_1"))
	assert.False(t, f == nil || f.Local != "" || len(f.Remote) != 0,
		"a malformed local member: %+v, want a federation without members", f)
	for what, s := range map[string]*corev1.Service{
		"no annotation":   fedService("web-federated", "-", "-"),
		"not -federated":  fedService("web", "web@west", "web"),
		"only the suffix": fedService("-federated", "web@west", "web"),
		"a cluster's mirror": func() *corev1.Service {
			s := fedService("web-federated", "web@west", "web")
			s.Labels[labels.ClusterName] = "federated" // Service web of a cluster named federated
			return s
		}(),
	} {
		assert.Nil(t, federation(s), "%s: federation", what)
	}
	m, _ := ToMirror(fedService("web-federated", "web@west", "web"))
	assert.Equal(t, &Federation{Remote: []FedMember{{"web", "west"}}, Local: "web"}, m.(*Mirror).Fed, "ToMirror: Fed")
}

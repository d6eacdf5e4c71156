package mcs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var t0 = time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)

func svc(mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIP:  "10.96.0.10",
		Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func reasons(m Merged) []mcsv1beta1.ServiceExportConditionReason {
	var out []mcsv1beta1.ServiceExportConditionReason
	for _, c := range m.Conflicts {
		out = append(out, c.Reason)
	}
	return out
}

func TestMergeAgreeing(t *testing.T) {
	m := Merge([]Export{
		{Cluster: "west", Created: t0.Add(time.Minute), Service: svc(nil)},
		{Cluster: "east", Created: t0, Service: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.7" })},
	})
	assert.Empty(t, m.Conflicts)
	assert.Equal(t, []string{"east", "west"}, m.Clusters, "oldest export first")
	assert.Equal(t, mcsv1beta1.ClusterSetIP, m.Spec.Type)
	assert.Equal(t, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, m.Spec.Ports)
	assert.Equal(t, corev1.ServiceAffinityNone, m.Spec.SessionAffinity)
	assert.Nil(t, m.Spec.SessionAffinityConfig)
	assert.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol}, m.Spec.IPFamilies)
	assert.Empty(t, m.Spec.IPs, "the importing cluster fills in its own ClusterSetIP")
}

func TestMergeNone(t *testing.T) {
	assert.Equal(t, Merged{}, Merge(nil))
}

// Ports: the union, merged by name and then by protocol and port, the
// oldest export winning a clash; any difference is a PortConflict.
func TestMergePorts(t *testing.T) {
	east := svc(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
	})
	west := svc(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080},    // same name, other port: east's wins
			{Name: "dns-tcp", Protocol: corev1.ProtocolUDP, Port: 53},   // same protocol and port, other name: east's wins
			{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090}, // new: added
		}
	})
	m := Merge([]Export{{Cluster: "west", Created: t0.Add(time.Second), Service: west}, {Cluster: "east", Created: t0, Service: east}})
	assert.Equal(t, []mcsv1beta1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090},
	}, m.Spec.Ports)
	require.Equal(t, []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonPortConflict}, reasons(m))
	msg := m.Conflicts[0].Message
	assert.Contains(t, msg, "dns=53/UDP http=80/TCP] in east")
	assert.Contains(t, msg, "in west")
	assert.Contains(t, msg, "the oldest export's (east)")

	// Ports listed in another order are the same ports.
	reordered := svc(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	})
	m = Merge([]Export{{Cluster: "east", Created: t0, Service: east}, {Cluster: "west", Created: t0.Add(time.Second), Service: reordered}})
	assert.Empty(t, m.Conflicts)
	assert.Len(t, m.Spec.Ports, 2)
}

// Headlessness and session affinity are the oldest export's; a tie on the
// timestamp goes to the lower cluster ID, whatever the order given.
func TestMergeTypeAndAffinity(t *testing.T) {
	headless := svc(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	sticky := svc(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })
	for _, order := range [][]Export{
		{{Cluster: "b", Created: t0, Service: sticky}, {Cluster: "a", Created: t0, Service: headless}},
		{{Cluster: "a", Created: t0, Service: headless}, {Cluster: "b", Created: t0, Service: sticky}},
	} {
		m := Merge(order)
		assert.Equal(t, []string{"a", "b"}, m.Clusters)
		assert.Equal(t, mcsv1beta1.Headless, m.Spec.Type)
		assert.Equal(t, corev1.ServiceAffinityNone, m.Spec.SessionAffinity)
		assert.Equal(t, []mcsv1beta1.ServiceExportConditionReason{
			mcsv1beta1.ServiceExportReasonTypeConflict,
			mcsv1beta1.ServiceExportReasonSessionAffinityConflict,
			mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict,
		}, reasons(m))
	}
}

// An unset ClientIP timeout is the API's default: no conflict with one that
// spells the default out, a conflict with another value.
func TestMergeAffinityTimeout(t *testing.T) {
	timeout := func(sec *int32) *corev1.Service {
		return svc(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			if sec != nil {
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: sec}}
			}
		})
	}
	def, short := corev1.DefaultClientIPServiceAffinitySeconds, int32(60)
	m := Merge([]Export{{Cluster: "a", Created: t0, Service: timeout(nil)}, {Cluster: "b", Created: t0, Service: timeout(&def)}})
	assert.Empty(t, m.Conflicts)
	require.NotNil(t, m.Spec.SessionAffinityConfig)
	assert.Equal(t, def, *m.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds)

	m = Merge([]Export{{Cluster: "a", Created: t0.Add(time.Hour), Service: timeout(nil)}, {Cluster: "b", Created: t0, Service: timeout(&short)}})
	assert.Equal(t, []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict}, reasons(m))
	assert.Equal(t, short, *m.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds, "b's export is older")
}

// IP families: the union, the oldest export's first, and a conflict, since
// a client of one family then reaches only some clusters' backends.
func TestMergeFamilies(t *testing.T) {
	dual := svc(func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	m := Merge([]Export{{Cluster: "east", Created: t0.Add(time.Second), Service: svc(nil)}, {Cluster: "west", Created: t0, Service: dual}})
	assert.Equal(t, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, m.Spec.IPFamilies)
	assert.Equal(t, []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonIPFamilyConflict}, reasons(m))
}

// The traffic policies: unset is the default, and equal to it spelled out.
func TestMergeTrafficPolicies(t *testing.T) {
	cluster, local := corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal
	prefer := corev1.ServiceTrafficDistributionPreferClose
	m := Merge([]Export{
		{Cluster: "a", Created: t0, Service: svc(nil)},
		{Cluster: "b", Created: t0, Service: svc(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = &cluster })},
	})
	assert.Empty(t, m.Conflicts)

	m = Merge([]Export{
		{Cluster: "a", Created: t0, Service: svc(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = &local })},
		{Cluster: "b", Created: t0, Service: svc(func(s *corev1.Service) { s.Spec.TrafficDistribution = &prefer })},
	})
	assert.Equal(t, []mcsv1beta1.ServiceExportConditionReason{
		mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict,
		mcsv1beta1.ServiceExportReasonTrafficDistributionConflict,
	}, reasons(m))
	assert.Equal(t, &local, m.Spec.InternalTrafficPolicy)
	assert.Nil(t, m.Spec.TrafficDistribution)
}

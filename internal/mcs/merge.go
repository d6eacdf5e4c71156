// Package mcs computes what the Multi-Cluster Services API (KEP-1645,
// sigs.k8s.io/mcs-api) makes of a Service that several clusters export under
// one namespace and name: the ServiceImport every linked cluster gets, merged
// from the exports by the specification's conflict rules, and the conditions
// each exporting cluster writes on its ServiceExport. It is computation
// only; the controller reads the objects and writes the results.
package mcs

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Export is one cluster's export of a Service.
type Export struct {
	// Cluster is the exporting cluster's ID.
	Cluster string
	// Created is the ServiceExport's creationTimestamp. In a conflict the
	// oldest export wins, then the lowest cluster ID.
	Created time.Time
	// Service is the exported Service as its cluster has it.
	Service *corev1.Service
	// Metadata is what its ServiceExport exports beside the Service,
	// screened (ScreenMetadata); none for a Service exported otherwise.
	Metadata Metadata
}

// Conflict is one property on which the exports disagree.
type Conflict struct {
	Reason  mcsv1alpha1.ServiceExportConditionReason
	Message string
}

// Merged is the clusterset's view of one exported Service.
type Merged struct {
	// Spec is the ServiceImport's spec, all but IPs, which the importing
	// cluster fills with its own ClusterSetIP.
	Spec mcsv1alpha1.ServiceImportSpec
	// Metadata are the ServiceImport's exported labels and annotations:
	// those of the export that takes precedence.
	Metadata Metadata
	// Clusters are the exporting clusters, in order of precedence.
	Clusters []string
	// Conflicts are the properties the exports disagree on, each resolved
	// in favour of the export that takes precedence; empty when they agree.
	Conflicts []Conflict
}

// Merge merges the exports of one Service. The rules are the
// specification's ("Constraints and Conflict Resolution"): the import has
// the union of the exports' ports, merged by name and then by protocol and
// port, and a port that clashes with one of an export of higher precedence
// is left out; headlessness, session affinity and the traffic policies are
// those of the export with precedence, and so are the exported labels and
// the exported annotations, each set whole ("Labels and Annotations": the
// conflict resolution decides when the sets of name/value pairs are not
// identical). Each disagreement is a Conflict. Merge of no exports is the
// zero Merged.
func Merge(exports []Export) Merged {
	if len(exports) == 0 {
		return Merged{}
	}
	ordered := slices.Clone(exports)
	slices.SortStableFunc(ordered, func(a, b Export) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Cluster, b.Cluster))
	})
	first := ordered[0]
	var m Merged
	for _, e := range ordered {
		m.Clusters = append(m.Clusters, e.Cluster)
	}
	m.Spec.Type = importType(first.Service)
	m.Spec.SessionAffinity = affinity(first.Service)
	m.Spec.SessionAffinityConfig = affinityConfig(first.Service)
	m.Spec.InternalTrafficPolicy = first.Service.Spec.InternalTrafficPolicy
	m.Spec.TrafficDistribution = first.Service.Spec.TrafficDistribution
	m.Metadata = Metadata{Labels: maps.Clone(first.Metadata.Labels), Annotations: maps.Clone(first.Metadata.Annotations)}

	m.Spec.Ports = ports(ordered)
	m.Spec.IPFamilies = families(ordered)

	addExport := func(reason mcsv1alpha1.ServiceExportConditionReason, what string, value func(Export) string) {
		if c, ok := differ(ordered, what, value); ok {
			m.Conflicts = append(m.Conflicts, Conflict{Reason: reason, Message: c})
		}
	}
	add := func(reason mcsv1alpha1.ServiceExportConditionReason, what string, value func(*corev1.Service) string) {
		addExport(reason, what, func(e Export) string { return value(e.Service) })
	}
	add(mcsv1alpha1.ServiceExportReasonTypeConflict, "type", func(s *corev1.Service) string { return string(importType(s)) })
	add(mcsv1alpha1.ServiceExportReasonPortConflict, "ports", portsString)
	add(mcsv1alpha1.ServiceExportReasonSessionAffinityConflict, "session affinity", func(s *corev1.Service) string { return string(affinity(s)) })
	add(mcsv1alpha1.ServiceExportReasonSessionAffinityConfigConflict, "session affinity timeout", func(s *corev1.Service) string {
		if c := affinityConfig(s); c != nil {
			return fmt.Sprintf("%ds", *c.ClientIP.TimeoutSeconds)
		}
		return "none"
	})
	add(mcsv1alpha1.ServiceExportReasonInternalTrafficPolicyConflict, "internal traffic policy", func(s *corev1.Service) string {
		return string(ptr.Deref(s.Spec.InternalTrafficPolicy, corev1.ServiceInternalTrafficPolicyCluster))
	})
	add(mcsv1alpha1.ServiceExportReasonTrafficDistributionConflict, "traffic distribution", func(s *corev1.Service) string {
		return ptr.Deref(s.Spec.TrafficDistribution, "none")
	})
	add(mcsv1alpha1.ServiceExportReasonIPFamilyConflict, "IP families", func(s *corev1.Service) string {
		return fmt.Sprint(s.Spec.IPFamilies)
	})
	addExport(mcsv1alpha1.ServiceExportReasonLabelsConflict, "exported labels", func(e Export) string {
		return metadataString(e.Metadata.Labels)
	})
	addExport(mcsv1alpha1.ServiceExportReasonAnnotationsConflict, "exported annotations", func(e Export) string {
		return metadataString(e.Metadata.Annotations)
	})
	return m
}

// importType is ClusterSetIP, or Headless for a Service without a cluster
// IP.
func importType(s *corev1.Service) mcsv1alpha1.ServiceImportType {
	if s.Spec.ClusterIP == corev1.ClusterIPNone {
		return mcsv1alpha1.Headless
	}
	return mcsv1alpha1.ClusterSetIP
}

func affinity(s *corev1.Service) corev1.ServiceAffinity {
	return cmp.Or(s.Spec.SessionAffinity, corev1.ServiceAffinityNone)
}

// affinityConfig is the ClientIP timeout that applies, nil without ClientIP
// affinity; an unset timeout is the API's default.
func affinityConfig(s *corev1.Service) *corev1.SessionAffinityConfig {
	if affinity(s) != corev1.ServiceAffinityClientIP {
		return nil
	}
	timeout := corev1.DefaultClientIPServiceAffinitySeconds
	if c := s.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = *c.ClientIP.TimeoutSeconds
	}
	return &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
}

// ports is the union of the exports' ports, in order of precedence.
func ports(ordered []Export) []mcsv1alpha1.ServicePort {
	var merged []mcsv1alpha1.ServicePort
	for _, e := range ordered {
		for _, sp := range e.Service.Spec.Ports {
			port := mcsv1alpha1.ServicePort{
				Name:        sp.Name,
				Protocol:    cmp.Or(sp.Protocol, corev1.ProtocolTCP),
				AppProtocol: sp.AppProtocol,
				Port:        sp.Port,
			}
			// By name first, then by protocol and port: a port that names or
			// numbers one already taken is the same port or a clash, which
			// the export with precedence, added first, wins.
			if !slices.ContainsFunc(merged, func(q mcsv1alpha1.ServicePort) bool {
				return q.Name == port.Name || (q.Protocol == port.Protocol && q.Port == port.Port)
			}) {
				merged = append(merged, port)
			}
		}
	}
	return merged
}

// portsString is a Service's ports as a comparable, readable string.
func portsString(s *corev1.Service) string {
	parts := make([]string, 0, len(s.Spec.Ports))
	for _, p := range s.Spec.Ports {
		part := fmt.Sprintf("%d/%s", p.Port, cmp.Or(p.Protocol, corev1.ProtocolTCP))
		if p.Name != "" {
			part = p.Name + "=" + part
		}
		if p.AppProtocol != nil {
			part += "(" + *p.AppProtocol + ")"
		}
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// families is the union of the exports' IP families, in order of
// precedence.
func families(ordered []Export) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, e := range ordered {
		for _, f := range e.Service.Spec.IPFamilies {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// differ reports, when value is not the same for every export, a message
// that names each value and its clusters and the one that applies.
func differ(ordered []Export, what string, value func(Export) string) (string, bool) {
	var values []string
	clusters := map[string][]string{}
	for _, e := range ordered {
		v := value(e)
		if _, ok := clusters[v]; !ok {
			values = append(values, v)
		}
		clusters[v] = append(clusters[v], e.Cluster)
	}
	if len(values) < 2 {
		return "", false
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf("%s in %s", v, strings.Join(clusters[v], ", "))
	}
	return fmt.Sprintf("the exports disagree on %s: %s; %s applies, the oldest export's (%s)",
		what, strings.Join(parts, "; "), values[0], ordered[0].Cluster), true
}

package labels

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Keys of mcmirror's own metadata, under the project's domain. The
// controller writes them; the DNS plugin and the gateway read them.
const (
	// Domain prefixes every label and annotation of mcmirror's own.
	Domain = "mcmirror.dev"

	// ManagedBy is on every object the controller created: Services,
	// EndpointSlices and Namespaces. It is the ownership test: an object
	// without it is never changed or deleted.
	ManagedBy = Domain + "/managed-by"

	// ManagedByValue is the value of ManagedBy.
	ManagedByValue = "controller"

	// RemoteService names, on every mirror object, the remote Service it
	// mirrors (in the same namespace, in the cluster named by the
	// mirror.linkerd.io/cluster-name label). With the cluster name and the
	// namespace it makes the object's work-queue key.
	RemoteService = Domain + "/remote-service"

	// ModeLabel is, on a Service mirror (<svc>-<cluster>), how the remote
	// Service is exported: ModeGateway or ModeFlat. A flat mirror needs
	// no routing by the gateway.
	ModeLabel = Domain + "/mode"

	// ModeGateway and ModeFlat are the values of ModeLabel.
	ModeGateway = "gateway"
	ModeFlat    = "flat"

	// RemoteHeadless is the annotation, "true", on a Service mirror whose
	// remote Service is headless: a flat-mode mirror is headless whatever
	// the remote is, and DNS in import mode answers per-pod names of a
	// headless remote Service only.
	RemoteHeadless = Domain + "/remote-headless"

	// FlatEndpoints is the label, "true", on the controller's copies of a
	// flat-mode export's EndpointSlices (--mirror-flat-endpoints), which
	// DNS in import mode answers from. The cluster DNS's kubernetes plugin
	// is given the selector NotFlatEndpoints, so that it does not hold a
	// second copy of every mirrored endpoint.
	FlatEndpoints = Domain + "/flat-endpoints"

	// NotFlatEndpoints is the label selector of the kubernetes plugin's
	// objects in a cluster DNS in import mode: everything but the copies.
	NotFlatEndpoints = "!" + FlatEndpoints

	// RemoteHostname is, on a per-pod mirror, the hostname of the remote
	// endpoint it stands for.
	RemoteHostname = Domain + "/remote-hostname"

	// EgressPorts is the annotation that records, on each mirror Service
	// whose EndpointSlice points at the gateway egress, the egress port
	// allocated to each of its ports: "80/TCP=30000,53/UDP=30001". It is
	// what makes the allocation survive controller restarts, and what the
	// gateway reads to map an egress port back to a remote destination.
	EgressPorts = Domain + "/egress-ports"

	// EndpointSliceManagedBy is the value of the
	// endpointslice.kubernetes.io/managed-by label on the controller's
	// EndpointSlices, so that no EndpointSlice controller touches them. A
	// label value cannot hold a "/", so it is written the way Kubernetes
	// writes its own (endpointslice-controller.k8s.io).
	EndpointSliceManagedBy = "controller." + Domain

	// ServiceExportMode is the label the controller stamps on a local
	// Service that a ServiceExport (multicluster.x-k8s.io) exports, by
	// server-side apply; its value is ModeGateway or ModeFlat. Readers in
	// every cluster select it beside the Linkerd export label, so a
	// ServiceExport needs no CRD, and no extra RBAC, in the clusters that
	// read it. It is the controller's alone: the admission policy lets
	// only the controller set, change or remove the keys of
	// ServiceExportDomain on Services, and the exporting cluster's
	// controller removes a stamp from a Service that no ServiceExport
	// exports. Its key is outside Domain on purpose: the EndpointSlice
	// controller copies a Service's labels onto its slices, and the
	// admission policy lets only the controller write Domain keys there.
	ServiceExportMode = ServiceExportDomain + "/mode"

	// ServiceExportDomain is the prefix of the stamp's keys
	// (ServiceExportMode, ServiceExportCreated, ServiceExportMetadata).
	ServiceExportDomain = "serviceexport." + Domain

	// ServiceExportSelector selects the Services stamped by a ServiceExport
	// (never a mirror, never a derived Service: what mcmirror made is not
	// exported again).
	ServiceExportSelector = ServiceExportMode + " in (" + ModeGateway + "," + ModeFlat + "),!" + MirroredService + ",!" + ServiceImport

	// ServiceExportCreated is the annotation beside ServiceExportMode that
	// keeps the ServiceExport's creation time (RFC 3339), so that every
	// cluster can apply the specification's conflict precedence (oldest
	// export wins) without reading ServiceExports. Readers believe it only
	// beside the ServiceExportMode label, and never earlier than the
	// Service's own creationTimestamp (which the API server sets): a
	// Service exported by Linkerd's label alone counts from its creation.
	ServiceExportCreated = ServiceExportDomain + "/created"

	// ServiceExportMetadata is the annotation beside ServiceExportMode
	// that carries what the ServiceExport's spec.exportedLabels and
	// spec.exportedAnnotations export, as JSON
	// ({"labels":{...},"annotations":{...}}, {} for none), so that every
	// importing cluster can put them on its ServiceImport without reading
	// ServiceExports. Written with the rest of the stamp, reserved with it
	// by the admission policy, and believed only beside ServiceExportMode.
	ServiceExportMetadata = ServiceExportDomain + "/exported-metadata"

	// ServiceImport names, on a derived Service (the local Service the
	// controller keeps for a ServiceImport: its ClusterSetIPs, or
	// headless), the ServiceImport and the exported Service it stands for,
	// in the same namespace. The DNS plugin reads it for the
	// clusterset.local names.
	ServiceImport = Domain + "/service-import"

	// DerivedSelector selects the derived Services: those the controller
	// made (ManagedBy) for a ServiceImport.
	DerivedSelector = ServiceImport + "," + ManagedBy + "=" + ManagedByValue

	// LinkAllowedNamespaces and LinkDeniedNamespaces are the annotations
	// of a link Secret that narrow what the link brings to some of the
	// linked cluster's namespaces: a comma-separated list each; without
	// either, every namespace (link.Namespaces).
	LinkAllowedNamespaces = Domain + "/allowed-namespaces"
	LinkDeniedNamespaces  = Domain + "/denied-namespaces"
)

// EgressPortKey names one port of a Service in the EgressPorts annotation:
// "80/TCP".
func EgressPortKey(port int32, protocol string) string {
	return strconv.Itoa(int(port)) + "/" + protocol
}

// FormatEgressPorts renders the EgressPorts annotation, sorted by key.
func FormatEgressPorts(ports map[string]int32) string {
	keys := slices.Sorted(maps.Keys(ports))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(int(ports[k]))
	}
	return strings.Join(parts, ",")
}

// ParseEgressPorts reads the EgressPorts annotation; malformed entries are
// skipped.
func ParseEgressPorts(s string) map[string]int32 {
	out := map[string]int32{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !strings.Contains(k, "/") {
			continue
		}
		p, err := strconv.ParseInt(v, 10, 32)
		if err != nil || p < 1 || p > 65535 {
			continue
		}
		out[k] = int32(p)
	}
	return out
}

// SplitEgressPortKey returns the port and protocol of an EgressPorts key.
func SplitEgressPortKey(k string) (int32, string, bool) {
	n, proto, ok := strings.Cut(k, "/")
	p, err := strconv.ParseUint(n, 10, 16)
	if !ok || err != nil || p == 0 || proto == "" {
		return 0, "", false
	}
	return int32(p), proto, true
}

// Package labels holds the label and annotation keys that mcmirror shares
// with Linkerd's multicluster extension, and the naming rules for mirror
// objects.
//
// The keys are Linkerd's own on purpose: a fleet that already exports
// Services with Linkerd keeps working, and mirror Services made by Linkerd's
// service mirror serve the mcmirror DNS plugin as well as those made by the
// mcmirror controller. Both the plugin and the controller import this
// package, so the two can never disagree on a name.
package labels

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// Prefix is the prefix of every label, annotation and Secret type that
	// Linkerd's service mirror uses.
	Prefix = "mirror.linkerd.io"

	// Exported is the label that exports a Service to linked clusters. Its
	// value selects the mode: ExportGateway or ExportFlat.
	Exported = Prefix + "/exported"

	// ExportGateway is the value of Exported for gateway mode: other
	// clusters reach the Service through local mirror ClusterIPs that point
	// at the gateway.
	ExportGateway = "true"

	// ExportFlat is the value of Exported for flat mode ("remote
	// discovery" in Linkerd): pods of every cluster reach each other's pod
	// IPs directly, so DNS answers the remote pod IPs.
	ExportFlat = "remote-discovery"

	// DefaultExportSelector selects the Services exported in either mode.
	DefaultExportSelector = Exported + " in (" + ExportGateway + "," + ExportFlat + ")"

	// MirroredService marks a Service (or EndpointSlice) as a mirror of a
	// remote object; its value is MirroredServiceValue.
	MirroredService = Prefix + "/mirrored-service"

	// MirroredServiceValue is the value of MirroredService.
	MirroredServiceValue = "true"

	// MirrorSelector selects the mirror Services of the local cluster.
	MirrorSelector = MirroredService + "=" + MirroredServiceValue

	// ClusterName names, on a mirror object, the remote cluster it mirrors.
	ClusterName = Prefix + "/cluster-name"

	// HeadlessMirrorSvcName is set on each per-pod "endpoint mirror"
	// Service (<host>-<cluster>) and names the headless mirror Service
	// (<svc>-<cluster>) it belongs to.
	HeadlessMirrorSvcName = Prefix + "/headless-mirror-svc-name"

	// RemoteResourceVersion is the annotation that keeps the remote
	// object's resourceVersion on a mirror, so that no-op updates are
	// skipped.
	RemoteResourceVersion = Prefix + "/remote-resource-version"

	// RemoteSvcFQName is the annotation that keeps the fully qualified DNS
	// name of the remote Service (or pod) on a mirror.
	RemoteSvcFQName = Prefix + "/remote-svc-fq-name"

	// LinkSecretType is the type of the Secrets that hold a kubeconfig for a
	// linked cluster, as `linkerd multicluster link` writes them.
	LinkSecretType = Prefix + "/remote-kubeconfig"

	// LinkSecretKey is the data key of the kubeconfig in a link Secret.
	LinkSecretKey = "kubeconfig"

	// LinkClusterName is the label that names the linked cluster on a link
	// Secret (Linkerd's destination controller reads the same label).
	LinkClusterName = "multicluster.linkerd.io/cluster-name"

	// LinkSecretNamePrefix prefixes the name of the link Secret that
	// `linkerd multicluster link` writes: cluster-credentials-<cluster>. It
	// names the cluster when the LinkClusterName label is absent.
	LinkSecretNamePrefix = "cluster-credentials-"

	// ServiceName is the label that ties an EndpointSlice to its Service.
	ServiceName = "kubernetes.io/service-name"

	// EndpointsLastChangeTriggerTime is the annotation the EndpointSlice
	// controller sets to the time of the change that triggered the update.
	EndpointsLastChangeTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

	// Global is the suffix of the names that aggregate every cluster
	// exporting a Service: <svc>-global. No cluster may be named so.
	Global = "global"

	// Federated is the label that makes a Service a member of a federated
	// Service, with the value FederatedMember: what Linkerd's default
	// federated service selector selects (a Link's
	// federatedServiceSelector, the local service mirror's
	// -federated-service-selector).
	Federated = Prefix + "/federated"

	// FederatedMember is the value of Federated.
	FederatedMember = "member"

	// FederatedSelector selects the federated members of a cluster (never
	// a mirror).
	FederatedSelector = Federated + "=" + FederatedMember + ",!" + MirroredService

	// FederatedSuffix ends the name of the local federated Service that
	// Linkerd's service mirror makes for members named <svc>:
	// <svc>-federated, labelled MirroredService and without ClusterName.
	FederatedSuffix = "federated"

	// RemoteDiscoveryAnnotation lists, on a federated Service, its members
	// in linked clusters: comma-separated <svc>@<cluster>, each a Service
	// <svc> of the federated Service's namespace in that cluster.
	RemoteDiscoveryAnnotation = "multicluster.linkerd.io/remote-discovery"

	// LocalDiscoveryAnnotation names, on a federated Service, its member in
	// the local cluster: a Service of the same namespace.
	LocalDiscoveryAnnotation = "multicluster.linkerd.io/local-discovery"
)

// Mode is how a Service is exported.
type Mode uint8

const (
	// NotExported is the mode of a Service without a known export value.
	NotExported Mode = iota
	// Gateway mode: reached through local mirror ClusterIPs.
	Gateway
	// Flat mode: reached at the remote pod IPs.
	Flat
)

// String returns the label value of the mode.
func (m Mode) String() string {
	switch m {
	case Gateway:
		return ExportGateway
	case Flat:
		return ExportFlat
	}
	return ""
}

// ExportMode returns the export mode that labels ask for. Linkerd's label
// decides when present; else the ServiceExport stamp (ServiceExportMode).
// Any other value counts as gateway mode, so that a custom export selector
// (say `example.com/export=yes`) still exports through the gateway.
func ExportMode(labels map[string]string) Mode {
	if v, ok := labels[Exported]; ok {
		if v == ExportFlat {
			return Flat
		}
		return Gateway
	}
	if labels[ServiceExportMode] == ModeFlat {
		return Flat
	}
	return Gateway
}

// ValidateClusterName returns an error when name cannot be used as a cluster
// name: it becomes the last part of a Service name (<svc>-<cluster>), so it
// must be a DNS label, and "global" is taken by the aggregate names.
func ValidateClusterName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("invalid cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	if name == Global {
		return fmt.Errorf("invalid cluster name %q: reserved for the %s names", name, Global)
	}
	return nil
}

// MirrorName returns the name of the local mirror of Service svc of cluster:
// <svc>-<cluster>. It returns an error, never a truncated name, when the
// result is not a valid Service name (longer than 63 characters, say).
func MirrorName(svc, cluster string) (string, error) {
	return join(svc, cluster)
}

// EndpointMirrorName returns the name of the per-pod mirror Service of the
// endpoint with hostname host of cluster: <host>-<cluster>. It returns an
// error, never a truncated name, when the result is not a valid Service name.
func EndpointMirrorName(host, cluster string) (string, error) {
	return join(host, cluster)
}

// SplitMirrorName returns the Service name that name mirrors from cluster,
// and false when name does not end in -<cluster>.
func SplitMirrorName(name, cluster string) (string, bool) {
	base, ok := strings.CutSuffix(name, "-"+cluster)
	if !ok || base == "" {
		return "", false
	}
	return base, true
}

func join(name, cluster string) (string, error) {
	if name == "" || cluster == "" {
		return "", fmt.Errorf("cannot name a mirror of %q in cluster %q: empty name", name, cluster)
	}
	n := name + "-" + cluster
	// Service names are DNS-1035 labels: at most 63 characters, starting
	// with a letter.
	if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
		return "", fmt.Errorf("mirror name %q is not a valid Service name: %s", n, strings.Join(errs, "; "))
	}
	return n, nil
}

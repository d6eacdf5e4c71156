package controller

// Keys of the controller's own metadata, under the project's domain. The
// Linkerd-compatible keys (mirrored-service, cluster-name,
// headless-mirror-svc-name, remote-resource-version) are in internal/labels.
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

	// Mode is, on a Service mirror (<svc>-<cluster>), how the remote
	// Service is exported: ModeGateway or ModeFlat. A flat mirror needs
	// no routing by the gateway.
	Mode = Domain + "/mode"

	// ModeGateway and ModeFlat are the values of Mode.
	ModeGateway = "gateway"
	ModeFlat    = "flat"

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
)

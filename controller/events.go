package controller

// Reasons of the Events the controller records. Each says why a remote
// Service (or one of its pods) is not mirrored, or not entirely.
const (
	// ReasonNameTaken: the name a mirror needs belongs to an object the
	// controller did not create (a local Service, a Linkerd mirror, or a
	// mirror of another cluster whose name happens to collide). The
	// object is left alone; the Event is recorded on it.
	ReasonNameTaken = "MirrorNameTaken"

	// ReasonNameTooLong: <svc>-<cluster> or <host>-<cluster> is not a
	// valid Service name (more than 63 characters, say). Names are never
	// truncated: a truncated name could collide and would not be the name
	// DNS answers for.
	ReasonNameTooLong = "MirrorNameInvalid"

	// ReasonHeadlessWithoutPorts: a headless Service without ports cannot
	// be mirrored (there is no port to point the gateway at), as in
	// Linkerd.
	ReasonHeadlessWithoutPorts = "HeadlessWithoutPorts"

	// ReasonExternalName: an ExternalName Service has no endpoints to
	// mirror.
	ReasonExternalName = "ExternalNameNotMirrored"

	// ReasonNamespaceMissing: the local namespace of an exported Service
	// does not exist (or is being deleted) and --create-namespaces is off.
	// The Event is recorded on the Namespace (so in namespace default).
	ReasonNamespaceMissing = "NamespaceMissing"

	// ReasonPortsExhausted: the egress port range is full; the mirror
	// exists but some of its ports have no EndpointSlice port until one is
	// released.
	ReasonPortsExhausted = "EgressPortsExhausted"

	// ReasonPodNameCollides: a remote pod's hostname is its Service's
	// name, so its per-pod mirror <host>-<cluster> would be the Service's
	// own mirror <svc>-<cluster>. That pod has no per-pod mirror.
	ReasonPodNameCollides = "MirrorPodNameCollides"

	// ReasonWriteFailed: the API server refused a write of a mirror (or
	// its EndpointSlice) for a reason a retry will not change (invalid,
	// forbidden), or a sync that failed maxRetries times and is dropped
	// until the key's next change. The Event is recorded on the Service
	// mirror; write_errors_total counts every failed write.
	ReasonWriteFailed = "MirrorWriteFailed"
)

// Reasons of the Events the controller records on a ServiceImport.
const (
	// ReasonImportEndpointsRefused: endpoints of a linked cluster's
	// flat-mode export are not imported, for the endpoint policy's
	// reason (internal/endpointpolicy): a hand-written slice, a target
	// that is no Pod of the Service's namespace, a selector-less Service
	// not opted in, an address never believed.
	ReasonImportEndpointsRefused = "ImportEndpointsRefused"

	// ReasonImportEndpointsLimited: the sources offer more endpoints than
	// --max-import-endpoints; each cluster keeps a fair part.
	ReasonImportEndpointsLimited = "ImportEndpointsLimited"

	// ReasonImportSourceNotSynced: a linked cluster that the import
	// names has not synced within --link-startup-timeout; the import
	// goes on and keeps that cluster's part as it last was.
	ReasonImportSourceNotSynced = "ImportSourceNotSynced"
)

// notMirroredReasons are the reasons the not_mirrored gauge is kept for.
var notMirroredReasons = []string{ReasonNameTaken, ReasonNameTooLong, ReasonHeadlessWithoutPorts, ReasonExternalName,
	ReasonNamespaceMissing, ReasonPortsExhausted, ReasonPodNameCollides}

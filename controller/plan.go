package controller

// The pure first step of a sync: from what the caches hold (plain values,
// no client), the mirror Services one exported Service should have. Every
// decision about names, shapes and grace periods is here, where it is
// tested without a client; sync.go applies the result.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// shape is what a remote Service is mirrored as.
type shape int

const (
	// shapeNone: nothing (not exported, not mirrorable, or unlinked).
	shapeNone shape = iota
	// shapeClusterIP: a ClusterIP mirror with an EndpointSlice to the
	// egress.
	shapeClusterIP
	// shapeHeadless: a headless mirror whose endpoints are per-pod
	// ClusterIP mirrors, each with an EndpointSlice to the egress.
	shapeHeadless
	// shapeFlat: a headless mirror without endpoints (flat mode: DNS
	// answers the remote pod IPs; see README.md).
	shapeFlat
)

// want is one mirror Service a sync wants.
type want struct {
	svc *corev1.Service
	// egress: the Service gets an EndpointSlice to the gateway egress.
	egress bool
	// host is, for a per-pod mirror, the remote hostname.
	host string
	// ready is, for a per-pod mirror, whether a remote endpoint with that
	// hostname is ready.
	ready bool
}

// planInput is everything the plan of one key is computed from.
type planInput struct {
	cluster, ns, name string
	// remote is the exported Service; nil when it is not (or no longer)
	// exported by a synced link.
	remote       *corev1.Service
	remoteSlices []*discoveryv1.EndpointSlice
	// owned are this key's existing mirror Services, by name.
	owned map[string]*corev1.Service
	// taken returns the Service of namespace ns called name when it is
	// not one of this key's (a foreign Service, or another key's mirror).
	taken func(name string) *corev1.Service
	// egressFamilies are the IP families of the egress addresses, IPv4
	// first: the families the ClusterIPs of egress mirrors may have for
	// kube-proxy to use their EndpointSlices (mirrorFamilies).
	egressFamilies []corev1.IPFamily

	now time.Time
	// podGrace and missing: how long, and since when, a per-pod mirror
	// (by name) outlives its remote endpoint.
	podGrace time.Duration
	missing  map[string]time.Time
	// headlessGrace and hostlessSince: how long, and since when, a
	// headless mirror stays headless while its remote endpoints have no
	// hostname.
	headlessGrace time.Duration
	hostlessSince time.Time
}

// notice is why (part of) a remote Service is not mirrored.
type notice struct {
	reason string
	msg    string
	// ref is what the Event is recorded on.
	ref *corev1.ObjectReference
}

// plan is the Services one key should have, and what to remember.
type plan struct {
	shape      shape
	mirrorName string
	// wants: the mirror first, then the per-pod mirrors sorted by name.
	// Every owned Service not in wants is to be deleted.
	wants []want
	// conflicts are the wanted names held by Services not this key's.
	conflicts []*corev1.Service
	notices   []notice
	// missing is the new PodGrace state of this key's per-pod mirrors,
	// hostlessSince the new headless stickiness state (zero: none).
	missing       map[string]time.Time
	hostlessSince time.Time
	// requeueAfter, when positive, is when a grace period ends.
	requeueAfter time.Duration
}

// planServices computes the mirror Services of one key.
func planServices(in planInput) plan {
	p := plan{missing: map[string]time.Time{}}
	p.mirrorName, p.shape = in.shapeOf(&p)
	if p.shape == shapeNone {
		return p
	}
	if t := in.taken(p.mirrorName); t != nil {
		// The mirror's name is someone else's: per-pod mirrors would
		// belong to nothing DNS can find.
		p.conflicts = append(p.conflicts, t)
		return p
	}
	main := in.mirrorService(p.mirrorName, p.shape != shapeClusterIP, p.shape == shapeClusterIP)
	main.Annotations[labels.RemoteResourceVersion] = in.remote.ResourceVersion
	if in.remote.Spec.ClusterIP == corev1.ClusterIPNone {
		main.Annotations[labels.RemoteHeadless] = "true"
	}
	// As the remote: DNS in import mode, and the kubernetes plugin, read
	// the endpoints' readiness through it.
	main.Spec.PublishNotReadyAddresses = in.remote.Spec.PublishNotReadyAddresses
	main.Labels[labels.ModeLabel] = labels.ModeGateway
	if p.shape == shapeFlat {
		main.Labels[labels.ModeLabel] = labels.ModeFlat
	}
	p.wants = []want{{svc: main, egress: p.shape == shapeClusterIP}}
	if p.shape != shapeHeadless {
		return p
	}

	// Per-pod mirrors: every remote hostname, and, for PodGrace, the
	// existing per-pod mirrors whose endpoint has just gone.
	hosts := in.remoteHosts()
	for _, name := range slices.Sorted(maps.Keys(in.owned)) {
		svc := in.owned[name]
		host := svc.Labels[labels.RemoteHostname]
		if svc.Labels[labels.HeadlessMirrorSvcName] != p.mirrorName || host == "" {
			continue
		}
		if _, live := hosts[host]; live {
			continue
		}
		since, ok := in.missing[name]
		if !ok {
			since = in.now
		}
		if left := in.podGrace - in.now.Sub(since); left > 0 {
			hosts[host] = false // kept, not ready
			p.missing[name] = since
			p.requeueAt(left)
		}
	}
	for _, host := range slices.Sorted(maps.Keys(hosts)) {
		podName, err := labels.EndpointMirrorName(host, in.cluster)
		if err != nil {
			p.notice(in.serviceRef(p.mirrorName), ReasonNameTooLong, "Pod %s of remote Service %s/%s/%s cannot be mirrored: %v", host, in.cluster, in.ns, in.name, err)
			continue
		}
		if podName == p.mirrorName {
			// The pod's hostname is its Service's name: its mirror
			// would be the Service's mirror.
			p.notice(in.serviceRef(p.mirrorName), ReasonPodNameCollides,
				"Pod %s of remote Service %s/%s/%s cannot be mirrored: its mirror %s would be the Service's own mirror", host, in.cluster, in.ns, in.name, podName)
			continue
		}
		if t := in.taken(podName); t != nil {
			p.conflicts = append(p.conflicts, t)
			continue
		}
		svc := in.mirrorService(podName, false, true)
		svc.Labels[labels.HeadlessMirrorSvcName] = p.mirrorName
		svc.Labels[labels.RemoteHostname] = host
		p.wants = append(p.wants, want{svc: svc, egress: true, host: host, ready: hosts[host]})
	}
	return p
}

func (p *plan) requeueAt(d time.Duration) {
	if p.requeueAfter == 0 || d < p.requeueAfter {
		p.requeueAfter = d
	}
}

func (p *plan) notice(ref *corev1.ObjectReference, reason, format string, args ...any) {
	p.notices = append(p.notices, notice{reason: reason, msg: fmt.Sprintf(format, args...), ref: ref})
}

// serviceRef is the Event target of a key: its mirror (by name, it may not
// exist), or the remote Service's name when no mirror name is valid.
func (in planInput) serviceRef(name string) *corev1.ObjectReference {
	if name == "" {
		name = in.name
	}
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: in.ns, Name: name}
}

// shapeOf decides what the remote Service is mirrored as, and under which
// name; it records why when the answer is nothing.
func (in planInput) shapeOf(p *plan) (string, shape) {
	rs := in.remote
	if rs == nil {
		return "", shapeNone
	}
	mirrorName, err := labels.MirrorName(in.name, in.cluster)
	if err != nil {
		p.notice(in.serviceRef(""), ReasonNameTooLong, "Remote Service %s/%s/%s cannot be mirrored: %v", in.cluster, in.ns, in.name, err)
		return "", shapeNone
	}
	ref := in.serviceRef(mirrorName)
	headless := rs.Spec.ClusterIP == corev1.ClusterIPNone
	switch {
	case rs.Spec.Type == corev1.ServiceTypeExternalName:
		p.notice(ref, ReasonExternalName, "Remote Service %s/%s/%s is of type ExternalName: nothing to mirror", in.cluster, in.ns, in.name)
		return "", shapeNone
	case labels.ExportMode(rs.Labels) == labels.Flat:
		return mirrorName, shapeFlat
	case headless && len(rs.Spec.Ports) == 0:
		p.notice(ref, ReasonHeadlessWithoutPorts, "Remote headless Service %s/%s/%s has no ports: it cannot be mirrored", in.cluster, in.ns, in.name)
		return "", shapeNone
	case headless && len(in.remoteHosts()) > 0:
		return mirrorName, shapeHeadless
	case headless:
		// No named endpoints: a ClusterIP mirror, as in Linkerd. But a
		// headless mirror stays headless for headlessGrace while its
		// pods are all gone or nameless (a rollout, a scale to zero):
		// switching would give every name a new address twice. After
		// that (a StatefulSet replaced by a Deployment) it switches.
		m := in.owned[mirrorName]
		if m == nil || m.Spec.ClusterIP != corev1.ClusterIPNone || m.Labels[labels.HeadlessMirrorSvcName] != "" || m.Labels[labels.ModeLabel] != labels.ModeGateway {
			return mirrorName, shapeClusterIP
		}
		since := in.hostlessSince
		if since.IsZero() {
			since = in.now
		}
		if left := in.headlessGrace - in.now.Sub(since); left > 0 {
			p.hostlessSince = since
			p.requeueAt(left)
			return mirrorName, shapeHeadless
		}
		return mirrorName, shapeClusterIP
	}
	return mirrorName, shapeClusterIP
}

// remoteHosts returns the hostnames of the remote endpoints, each with
// whether one of its endpoints is ready.
func (in planInput) remoteHosts() map[string]bool {
	hosts := map[string]bool{}
	for _, es := range in.remoteSlices {
		for _, ep := range es.Endpoints {
			if ep.Hostname == nil || *ep.Hostname == "" {
				continue
			}
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			hosts[*ep.Hostname] = hosts[*ep.Hostname] || ready
		}
	}
	return hosts
}

// mirrorService returns a mirror Service named name with the remote
// Service's ports; the EgressPorts annotation is added when ports are
// allocated. An egress mirror's ClusterIPs are of the families
// mirrorFamilies gives.
func (in planInput) mirrorService(name string, headless, egress bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: in.ns,
			Labels: map[string]string{
				labels.MirroredService: labels.MirroredServiceValue,
				labels.ClusterName:     in.cluster,
				labels.ManagedBy:       labels.ManagedByValue,
				labels.RemoteService:   in.name,
			},
			Annotations: map[string]string{},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if egress {
		if primary, dual := in.mirrorFamilies(in.owned[name]); primary != "" {
			svc.Spec.IPFamilies = []corev1.IPFamily{primary}
			svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
			if dual {
				svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyPreferDualStack)
			}
		}
	}
	for _, p := range in.remote.Spec.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name:        p.Name,
			Protocol:    p.Protocol,
			AppProtocol: p.AppProtocol,
			Port:        p.Port,
			TargetPort:  intstr.FromInt32(p.Port),
		})
	}
	return svc
}

// mirrorFamilies decides the IP families of an egress mirror (existing is
// the mirror as it is, nil when there is none): its primary family, and
// whether it is dual-stack. kube-proxy uses only the EndpointSlices of a
// Service's own families, so every family of the mirror must be one the
// egress has addresses in.
//
// The mirror is dual-stack when the remote Service has two families and
// the egress addresses are of both: PreferDualStack, with the remote's
// first family as primary. Only the primary is written (ipFamilies lists
// it alone): the API server adds the other family in a dual-stack
// cluster, in place on an update (SingleStack to PreferDualStack), and a
// single-stack cluster keeps a single-stack mirror rather than refusing
// it. Otherwise the mirror is SingleStack in the egress family, IPv4 when
// the egress has both.
//
// The primary family of a Service is immutable: an existing mirror keeps
// its own whenever the egress still has it, so that adding or dropping
// the second family is an update, never a replacement (which would give
// the name new addresses for the order alone). "" when the egress
// addresses are not known yet: the cluster's default.
func (in planInput) mirrorFamilies(existing *corev1.Service) (primary corev1.IPFamily, dual bool) {
	eg := in.egressFamilies
	if len(eg) == 0 {
		return "", false
	}
	primary = eg[0]
	dual = len(eg) == 2 && len(in.remote.Spec.IPFamilies) == 2
	if dual && slices.Contains(eg, in.remote.Spec.IPFamilies[0]) {
		primary = in.remote.Spec.IPFamilies[0]
	}
	if existing != nil && len(existing.Spec.IPFamilies) > 0 && slices.Contains(eg, existing.Spec.IPFamilies[0]) {
		primary = existing.Spec.IPFamilies[0]
	}
	return primary, dual
}

// replaceReason says why an existing mirror cannot be updated into the
// desired one and must be deleted and made again (the fields are
// immutable), or "" when it can be updated.
func replaceReason(existing, desired *corev1.Service) string {
	switch {
	case existing.Labels[labels.HeadlessMirrorSvcName] != desired.Labels[labels.HeadlessMirrorSvcName]:
		return "another role (a per-pod mirror named like a Service mirror, or the reverse)"
	case (existing.Spec.ClusterIP == corev1.ClusterIPNone) != (desired.Spec.ClusterIP == corev1.ClusterIPNone):
		return "headless or not changed"
	case len(desired.Spec.IPFamilies) > 0 && len(existing.Spec.IPFamilies) > 0 && existing.Spec.IPFamilies[0] != desired.Spec.IPFamilies[0]:
		return "the egress IP family changed"
	}
	return ""
}

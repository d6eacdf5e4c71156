package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
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

// sync makes the local mirrors of one exported Service (key
// cluster/namespace/service) what the remote cluster says they should be,
// and writes only the difference.
func (c *Controller) sync(ctx context.Context, key string) error {
	start := c.now()
	defer func() { syncDuration.Observe(time.Since(start).Seconds()) }()
	logger := klog.FromContext(ctx).WithValues("key", key)

	cluster, ns, name, err := splitKey(key)
	if err != nil {
		logger.Error(err, "Dropping a malformed key")
		return nil
	}
	r, keepFor := c.link(cluster)
	var remote *corev1.Service
	var remoteSlices []*discoveryv1.EndpointSlice
	switch {
	case r != nil && !r.synced.Load():
		// The link's sync enqueues every key of the cluster again.
		return nil
	case r == nil && keepFor > 0:
		c.queue.AddAfter(key, keepFor)
		return nil
	case r == nil && !c.linkSourcesSynced():
		// Maybe a link not read yet, not an orphan: ask again later.
		c.queue.AddAfter(key, time.Second)
		return nil
	case r != nil:
		if obj, ok, _ := r.services.GetStore().GetByKey(ns + "/" + name); ok {
			remote = obj.(*corev1.Service)
			// The informer is filtered by the selector already; this
			// guards against a watch that does not filter.
			if !c.opts.ExportSelector.Matches(k8slabels.Set(remote.Labels)) {
				remote = nil
			}
		}
		objs, _ := r.slices.GetIndexer().ByIndex(byService, ns+"/"+name)
		for _, o := range objs {
			remoteSlices = append(remoteSlices, o.(*discoveryv1.EndpointSlice))
		}
	}

	s := &syncer{c: c, ctx: ctx, logger: logger, key: key, cluster: cluster, ns: ns, name: name,
		remote: remote, remoteSlices: remoteSlices, egress: c.egressAddresses(), status: keyStatus{cluster: cluster}}
	err = s.run()
	c.setStatus(key, s.status)
	return err
}

// syncer is the state of one sync.
type syncer struct {
	c       *Controller
	ctx     context.Context
	logger  klog.Logger
	key     string
	cluster string
	ns      string
	name    string

	remote       *corev1.Service
	remoteSlices []*discoveryv1.EndpointSlice
	// egress are the gateway egress addresses, read once per sync.
	egress []netip.Addr

	// ownedServices and ownedSlices are the key's existing objects.
	ownedServices map[string]*corev1.Service
	ownedSlices   map[string]*discoveryv1.EndpointSlice
	// present are the desired Services as they exist after this sync's
	// writes (with their ClusterIPs).
	present map[string]*corev1.Service
	// keepPorts are the port owners still wanted or still recorded on a
	// Service or EndpointSlice; the group's other ports are released at
	// the end.
	keepPorts map[string]bool
	status    keyStatus
	errs      []error
}

func (s *syncer) run() error {
	c := s.c
	s.ownedServices = map[string]*corev1.Service{}
	s.ownedSlices = map[string]*discoveryv1.EndpointSlice{}
	s.present = map[string]*corev1.Service{}
	s.keepPorts = map[string]bool{}
	objs, _ := c.services.GetIndexer().ByIndex(byKey, s.key)
	for _, o := range objs {
		svc := o.(*corev1.Service)
		s.ownedServices[svc.Name] = svc
	}
	objs, _ = c.slices.GetIndexer().ByIndex(byKey, s.key)
	for _, o := range objs {
		es := o.(*discoveryv1.EndpointSlice)
		s.ownedSlices[es.Name] = es
	}
	c.mu.Lock()
	for n, k := range c.wanted {
		if k == s.key {
			delete(c.wanted, n)
		}
	}
	delete(c.starved, s.key)
	c.mu.Unlock()

	mirrorName, shp := s.shape()
	if shp != shapeNone && !s.namespaceReady() {
		// Nothing is deleted either: the namespace and what is in it
		// are going, or were never there.
		return errors.Join(s.errs...)
	}
	wants := s.wants(mirrorName, shp)

	// Services first: the headless mirror's EndpointSlice needs the
	// per-pod ClusterIPs.
	for i, w := range wants {
		if !s.applyService(w) && i == 0 {
			// The mirror's name is someone else's: per-pod mirrors
			// would belong to nothing DNS can find.
			wants = nil
			break
		}
	}
	desiredSlices := map[string]*discoveryv1.EndpointSlice{}
	for _, w := range wants {
		live := s.present[w.svc.Name]
		if live == nil {
			continue
		}
		var es *discoveryv1.EndpointSlice
		switch {
		case w.egress:
			es = s.egressSlice(live, w)
		case shp == shapeHeadless && w.svc.Name == mirrorName:
			es = s.headlessSlice(live, wants)
		}
		if es != nil {
			desiredSlices[es.Name] = es
		}
	}
	for _, name := range slices.Sorted(maps.Keys(desiredSlices)) {
		s.applySlice(desiredSlices[name])
	}

	// Delete what is no longer wanted: slices first, then Services.
	wanted := map[string]bool{}
	for _, w := range wants {
		wanted[w.svc.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(s.ownedSlices)) {
		if desiredSlices[name] == nil {
			s.deleteSlice(s.ownedSlices[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.ownedServices)) {
		if !wanted[name] {
			s.deleteService(s.ownedServices[name])
		}
	}
	if n := c.ports.ReleaseExcept(s.key, s.keepPorts); n > 0 {
		s.logger.V(2).Info("Released egress ports", "count", n)
		c.feedStarved()
	}
	return errors.Join(s.errs...)
}

// shape decides what the remote Service is mirrored as, and under which
// name; it records why when the answer is nothing.
func (s *syncer) shape() (string, shape) {
	rs := s.remote
	if rs == nil {
		return "", shapeNone
	}
	mirrorName, err := labels.MirrorName(s.name, s.cluster)
	if err != nil {
		s.notMirrored(ReasonNameTooLong, "Remote Service %s/%s/%s cannot be mirrored: %v", s.cluster, s.ns, s.name, err)
		return "", shapeNone
	}
	headless := rs.Spec.ClusterIP == corev1.ClusterIPNone
	switch {
	case rs.Spec.Type == corev1.ServiceTypeExternalName:
		s.notMirrored(ReasonExternalName, "Remote Service %s/%s/%s is of type ExternalName: nothing to mirror", s.cluster, s.ns, s.name)
		return "", shapeNone
	case labels.ExportMode(rs.Labels) == labels.Flat:
		return mirrorName, shapeFlat
	case headless && len(rs.Spec.Ports) == 0:
		s.notMirrored(ReasonHeadlessWithoutPorts, "Remote headless Service %s/%s/%s has no ports: it cannot be mirrored", s.cluster, s.ns, s.name)
		return "", shapeNone
	case headless && len(s.remoteHosts()) > 0:
		return mirrorName, shapeHeadless
	case headless:
		// No named endpoints: a ClusterIP mirror, as in Linkerd. But a
		// headless mirror stays headless while its pods are briefly
		// all gone (a rollout, a scale to zero): switching would give
		// every name a new address twice.
		if m := s.ownedServices[mirrorName]; m != nil && m.Spec.ClusterIP == corev1.ClusterIPNone &&
			m.Labels[labels.HeadlessMirrorSvcName] == "" && m.Labels[Mode] == ModeGateway {
			return mirrorName, shapeHeadless
		}
		return mirrorName, shapeClusterIP
	}
	return mirrorName, shapeClusterIP
}

// remoteHosts returns the hostnames of the remote endpoints, each with
// whether one of its endpoints is ready.
func (s *syncer) remoteHosts() map[string]bool {
	hosts := map[string]bool{}
	for _, es := range s.remoteSlices {
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

// namespaceReady reports whether mirrors can be written in the namespace,
// creating it when allowed.
func (s *syncer) namespaceReady() bool {
	c := s.c
	obj, exists, _ := c.namespaces.GetStore().GetByKey(s.ns)
	if exists {
		if obj.(*corev1.Namespace).DeletionTimestamp == nil {
			return true
		}
		s.notMirrored(ReasonNamespaceMissing, "Namespace %s is being deleted: remote Service %s/%s/%s is not mirrored", s.ns, s.cluster, s.ns, s.name)
		return false
	}
	if !c.opts.CreateNamespaces {
		s.notMirrored(ReasonNamespaceMissing, "Namespace %s does not exist (and --create-namespaces is off): remote Service %s/%s/%s is not mirrored", s.ns, s.cluster, s.ns, s.name)
		return false
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: map[string]string{ManagedBy: ManagedByValue}}}
	_, err := c.client.CoreV1().Namespaces().Create(s.ctx, nsObj, metav1.CreateOptions{})
	writesTotal.WithLabelValues("create", "namespaces").Inc()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.errs = append(s.errs, fmt.Errorf("create namespace %s: %w", s.ns, err))
		return false
	}
	s.logger.Info("Created namespace", "namespace", s.ns)
	return true
}

// notMirrored records why (part of) the remote Service is not mirrored:
// an Event, the status gauge, a log line.
func (s *syncer) notMirrored(reason, format string, args ...any) {
	s.status.reason = reason
	msg := fmt.Sprintf(format, args...)
	s.logger.Info("Not mirrored", "reason", reason, "message", msg)
	var ref *corev1.ObjectReference
	if reason == ReasonNamespaceMissing {
		ref = &corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: s.ns}
	} else {
		ref = &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: s.ns, Name: s.name}
		if name, err := labels.MirrorName(s.name, s.cluster); err == nil {
			ref.Name = name
		}
	}
	s.c.recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
}

// wants lists the Services the shape asks for: the mirror first, then the
// per-pod mirrors sorted by name.
func (s *syncer) wants(mirrorName string, shp shape) []want {
	if shp == shapeNone {
		return nil
	}
	rs := s.remote
	main := s.mirrorService(mirrorName, shp != shapeClusterIP)
	main.Annotations[labels.RemoteResourceVersion] = rs.ResourceVersion
	main.Labels[Mode] = ModeGateway
	if shp == shapeFlat {
		main.Labels[Mode] = ModeFlat
	}
	out := []want{{svc: main, egress: shp == shapeClusterIP}}
	if shp != shapeHeadless {
		return out
	}

	// Per-pod mirrors: every remote hostname, and, for PodGrace, the
	// existing per-pod mirrors whose endpoint has just gone.
	hosts := s.remoteHosts()
	now := s.c.now()
	s.c.mu.Lock()
	for _, svc := range s.ownedServices {
		host := svc.Labels[RemoteHostname]
		if svc.Labels[labels.HeadlessMirrorSvcName] != mirrorName || host == "" {
			continue
		}
		mk := svc.Namespace + "/" + svc.Name
		if _, live := hosts[host]; live {
			delete(s.c.missing, mk)
			continue
		}
		since, ok := s.c.missing[mk]
		if !ok {
			since = now
			s.c.missing[mk] = now
		}
		if left := s.c.opts.PodGrace - now.Sub(since); left > 0 {
			hosts[host] = false // kept, not ready
			s.c.queue.AddAfter(s.key, left)
		} else {
			delete(s.c.missing, mk)
		}
	}
	s.c.mu.Unlock()
	for _, host := range slices.Sorted(maps.Keys(hosts)) {
		podName, err := labels.EndpointMirrorName(host, s.cluster)
		if err != nil {
			s.notMirrored(ReasonNameTooLong, "Pod %s of remote Service %s/%s/%s cannot be mirrored: %v", host, s.cluster, s.ns, s.name, err)
			continue
		}
		svc := s.mirrorService(podName, false)
		svc.Labels[labels.HeadlessMirrorSvcName] = mirrorName
		svc.Labels[RemoteHostname] = host
		out = append(out, want{svc: svc, egress: true, host: host, ready: hosts[host]})
	}
	return out
}

// mirrorService returns a mirror Service named name with the remote
// Service's ports; the EgressPorts annotation is added by applyService.
func (s *syncer) mirrorService(name string, headless bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: s.ns,
			Labels: map[string]string{
				labels.MirroredService: labels.MirroredServiceValue,
				labels.ClusterName:     s.cluster,
				ManagedBy:              ManagedByValue,
				RemoteService:          s.name,
			},
			Annotations: map[string]string{},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range s.remote.Spec.Ports {
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

// portOwner names one port of one mirror Service for the allocator.
func portOwner(ns, svc, portKey string) string { return ns + "/" + svc + "/" + portKey }

// applyService creates or updates one wanted Service, unless its name is
// taken by an object the controller does not own for this key; it returns
// false in that case only.
func (s *syncer) applyService(w want) bool {
	c := s.c
	desired := w.svc
	existing := s.ownedServices[desired.Name]
	if existing == nil {
		if obj, ok, _ := c.services.GetStore().GetByKey(s.ns + "/" + desired.Name); ok {
			s.conflict(obj.(*corev1.Service), "services")
			return false
		}
	} else if existing.Labels[labels.HeadlessMirrorSvcName] != desired.Labels[labels.HeadlessMirrorSvcName] {
		// Ours, but another role (a per-pod mirror named like the
		// Service mirror): replace it.
		s.deleteService(existing)
		return true
	}

	if w.egress {
		recorded := map[string]int32{}
		if existing != nil {
			recorded = parseEgressPorts(existing.Annotations[EgressPorts])
		}
		got := map[string]int32{}
		for _, p := range desired.Spec.Ports {
			pk := portKey(p.Port, string(p.Protocol))
			owner := portOwner(s.ns, desired.Name, pk)
			s.keepPorts[owner] = true
			port, err := c.ports.Allocate(s.key, owner, recorded[pk])
			if err != nil {
				s.portsExhausted(existing, desired, pk)
				continue
			}
			got[pk] = port
		}
		desired.Annotations[EgressPorts] = formatEgressPorts(got)
	}

	if existing == nil {
		created, err := c.client.CoreV1().Services(s.ns).Create(s.ctx, desired, metav1.CreateOptions{})
		writesTotal.WithLabelValues("create", "services").Inc()
		if apierrors.IsAlreadyExists(err) {
			// Not yet in the cache: the next sync sees whose it is.
			s.errs = append(s.errs, fmt.Errorf("create service %s/%s: %w", s.ns, desired.Name, err))
			return true
		}
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("create service %s/%s: %w", s.ns, desired.Name, err))
			return true
		}
		s.logger.V(2).Info("Created mirror", "service", klog.KObj(created), "clusterIP", created.Spec.ClusterIP)
		s.present[created.Name] = created
		s.count(w)
		return true
	}
	if (existing.Spec.ClusterIP == corev1.ClusterIPNone) != (desired.Spec.ClusterIP == corev1.ClusterIPNone) {
		// Headless or not is immutable: recreate.
		s.deleteService(existing)
		return true
	}
	if !serviceNeedsUpdate(existing, desired) {
		s.present[existing.Name] = existing
		s.count(w)
		return true
	}
	updated := existing.DeepCopy()
	maps.Copy(updated.Labels, desired.Labels)
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	maps.Copy(updated.Annotations, desired.Annotations)
	if _, ok := desired.Annotations[EgressPorts]; !ok {
		delete(updated.Annotations, EgressPorts)
	}
	updated.Spec.Type = corev1.ServiceTypeClusterIP
	updated.Spec.Selector = nil
	updated.Spec.Ports = desired.Spec.Ports
	u, err := c.client.CoreV1().Services(s.ns).Update(s.ctx, updated, metav1.UpdateOptions{})
	writesTotal.WithLabelValues("update", "services").Inc()
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("update service %s/%s: %w", s.ns, desired.Name, err))
		s.keepRecorded(existing)
		s.present[existing.Name] = existing
		s.count(w)
		return true
	}
	s.logger.V(2).Info("Updated mirror", "service", klog.KObj(u))
	s.present[u.Name] = u
	s.count(w)
	return true
}

func (s *syncer) count(w want) {
	if w.host != "" {
		s.status.pods++
	} else {
		s.status.services++
	}
}

// serviceNeedsUpdate compares the fields the controller owns.
func serviceNeedsUpdate(existing, desired *corev1.Service) bool {
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return true
		}
	}
	for k, v := range desired.Annotations {
		if existing.Annotations[k] != v {
			return true
		}
	}
	if _, ok := desired.Annotations[EgressPorts]; !ok {
		if _, had := existing.Annotations[EgressPorts]; had {
			return true
		}
	}
	if existing.Spec.Type != corev1.ServiceTypeClusterIP || len(existing.Spec.Selector) > 0 {
		return true
	}
	if len(existing.Spec.Ports) != len(desired.Spec.Ports) {
		return true
	}
	for i, d := range desired.Spec.Ports {
		e := existing.Spec.Ports[i]
		if e.Name != d.Name || e.Protocol != d.Protocol || e.Port != d.Port || e.TargetPort != d.TargetPort ||
			!apiequality.Semantic.DeepEqual(e.AppProtocol, d.AppProtocol) {
			return true
		}
	}
	return false
}

// conflict reports a wanted name held by an object the controller must not
// touch.
func (s *syncer) conflict(obj *corev1.Service, resource string) {
	conflictsTotal.WithLabelValues(resource).Inc()
	s.status.reason = ReasonNameTaken
	s.c.mu.Lock()
	s.c.wanted[obj.Namespace+"/"+obj.Name] = s.key
	s.c.mu.Unlock()
	msg := fmt.Sprintf("Name wanted by the mirror of remote Service %s/%s/%s is taken by a Service that this mirror does not own; leaving it alone", s.cluster, s.ns, s.name)
	s.logger.Info("Mirror name taken", "service", klog.KObj(obj))
	s.c.recorder.Event(obj, corev1.EventTypeWarning, ReasonNameTaken, msg)
}

func (s *syncer) portsExhausted(existing, desired *corev1.Service, pk string) {
	s.status.reason = ReasonPortsExhausted
	s.c.mu.Lock()
	s.c.starved[s.key] = true
	s.c.mu.Unlock()
	msg := fmt.Sprintf("No egress port left in %s for port %s of %s", s.c.opts.EgressPorts, pk, desired.Name)
	s.logger.Info("Egress ports exhausted", "service", desired.Name, "port", pk)
	var ref *corev1.ObjectReference
	if existing != nil {
		ref = &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: existing.Namespace, Name: existing.Name, UID: existing.UID}
	} else {
		ref = &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: s.ns, Name: desired.Name}
	}
	s.c.recorder.Event(ref, corev1.EventTypeWarning, ReasonPortsExhausted, msg)
}

// feedStarved enqueues the keys waiting for egress ports.
func (c *Controller) feedStarved() {
	c.mu.Lock()
	keys := slices.Collect(maps.Keys(c.starved))
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// keepRecorded keeps the egress ports recorded on svc after a write that
// would have dropped them failed: the cluster still records them, so
// releasing them could give one port to two mirrors.
func (s *syncer) keepRecorded(svc *corev1.Service) {
	for pk := range parseEgressPorts(svc.Annotations[EgressPorts]) {
		s.keepPorts[portOwner(svc.Namespace, svc.Name, pk)] = true
	}
}

func (s *syncer) deleteService(svc *corev1.Service) {
	err := s.c.client.CoreV1().Services(svc.Namespace).Delete(s.ctx, svc.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &svc.UID},
	})
	writesTotal.WithLabelValues("delete", "services").Inc()
	if err != nil && !apierrors.IsNotFound(err) {
		s.errs = append(s.errs, fmt.Errorf("delete service %s/%s: %w", svc.Namespace, svc.Name, err))
		s.keepRecorded(svc)
		return
	}
	s.c.mu.Lock()
	delete(s.c.missing, svc.Namespace+"/"+svc.Name)
	s.c.mu.Unlock()
	s.logger.V(2).Info("Deleted mirror", "service", klog.KObj(svc))
}

func (s *syncer) deleteSlice(es *discoveryv1.EndpointSlice) {
	err := s.c.client.DiscoveryV1().EndpointSlices(es.Namespace).Delete(s.ctx, es.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &es.UID},
	})
	writesTotal.WithLabelValues("delete", "endpointslices").Inc()
	if err != nil && !apierrors.IsNotFound(err) {
		s.errs = append(s.errs, fmt.Errorf("delete endpointslice %s/%s: %w", es.Namespace, es.Name, err))
		s.keepSlicePorts(es)
	}
}

// keepSlicePorts keeps the egress ports an egress EndpointSlice points at
// after a write that would have changed or removed it failed: kube-proxy
// still sends the mirror's traffic there.
//
// An egress slice is told by its shape (isEgressSlice), whatever addresses
// it lists; only ports allocated to the slice's own Service are kept.
func (s *syncer) keepSlicePorts(es *discoveryv1.EndpointSlice) {
	if !isEgressSlice(es) {
		return // a headless mirror's slice: Service ports, not egress ports
	}
	prefix := portOwner(es.Namespace, es.Labels[discoveryv1.LabelServiceName], "")
	for _, p := range es.Ports {
		if p.Port == nil {
			continue
		}
		if owner, ok := s.c.ports.Owner(*p.Port); ok && strings.HasPrefix(owner, prefix) {
			s.keepPorts[owner] = true
		}
	}
}

// sliceFor returns an EndpointSlice of svc with the controller's labels.
func (s *syncer) sliceFor(svc *corev1.Service, at discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name,
			Namespace: s.ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   EndpointSliceManagedBy,
				labels.MirroredService:       labels.MirroredServiceValue,
				labels.ClusterName:           s.cluster,
				ManagedBy:                    ManagedByValue,
				RemoteService:                s.name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
			}},
		},
		AddressType: at,
	}
}

// egressSlice points svc's ports at their egress ports, on every egress
// address (one endpoint each; none before any address is known).
func (s *syncer) egressSlice(svc *corev1.Service, w want) *discoveryv1.EndpointSlice {
	allocated := parseEgressPorts(svc.Annotations[EgressPorts])
	es := s.sliceFor(svc, egressAddressType(s.egress))
	es.Endpoints = egressEndpoints(s.egress, w.host == "" || w.ready)
	for _, p := range svc.Spec.Ports {
		ep, ok := allocated[portKey(p.Port, string(p.Protocol))]
		if !ok {
			continue
		}
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{
			Name: new(p.Name), Protocol: new(p.Protocol), Port: new(ep), AppProtocol: p.AppProtocol,
		})
	}
	if len(es.Ports) == 0 {
		return nil
	}
	return es
}

// headlessSlice lists, for the headless mirror svc, one endpoint per
// per-pod mirror: its ClusterIP under the remote hostname.
func (s *syncer) headlessSlice(svc *corev1.Service, wants []want) *discoveryv1.EndpointSlice {
	var eps []discoveryv1.Endpoint
	at := discoveryv1.AddressTypeIPv4
	for _, w := range wants {
		if w.host == "" {
			continue
		}
		pod := s.present[w.svc.Name]
		if pod == nil || pod.Spec.ClusterIP == "" || pod.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		ip, err := netip.ParseAddr(pod.Spec.ClusterIP)
		if err != nil {
			continue
		}
		if len(eps) == 0 {
			at = addressType(ip)
		} else if addressType(ip) != at {
			continue
		}
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{pod.Spec.ClusterIP},
			Hostname:   new(w.host),
			Conditions: discoveryv1.EndpointConditions{Ready: new(w.ready)},
		})
	}
	sort.Slice(eps, func(i, j int) bool { return *eps[i].Hostname < *eps[j].Hostname })
	es := s.sliceFor(svc, at)
	es.Endpoints = eps
	for _, p := range svc.Spec.Ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{
			Name: new(p.Name), Protocol: new(p.Protocol), Port: new(p.Port), AppProtocol: p.AppProtocol,
		})
	}
	return es
}

func addressType(a netip.Addr) discoveryv1.AddressType {
	if a.Is4() || a.Is4In6() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// applySlice creates or updates one EndpointSlice.
func (s *syncer) applySlice(desired *discoveryv1.EndpointSlice) {
	c := s.c
	existing := s.ownedSlices[desired.Name]
	if existing != nil && existing.AddressType != desired.AddressType {
		// The address type is immutable: recreate.
		s.deleteSlice(existing)
		delete(s.ownedSlices, desired.Name)
		existing = nil
	}
	if existing == nil {
		_, err := c.client.DiscoveryV1().EndpointSlices(s.ns).Create(s.ctx, desired, metav1.CreateOptions{})
		writesTotal.WithLabelValues("create", "endpointslices").Inc()
		if apierrors.IsAlreadyExists(err) {
			s.sliceConflict(desired)
			return
		}
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("create endpointslice %s/%s: %w", s.ns, desired.Name, err))
		}
		return
	}
	if !sliceNeedsUpdate(existing, desired) {
		return
	}
	updated := existing.DeepCopy()
	maps.Copy(updated.Labels, desired.Labels)
	updated.OwnerReferences = desired.OwnerReferences
	updated.Endpoints = desired.Endpoints
	updated.Ports = desired.Ports
	_, err := c.client.DiscoveryV1().EndpointSlices(s.ns).Update(s.ctx, updated, metav1.UpdateOptions{})
	writesTotal.WithLabelValues("update", "endpointslices").Inc()
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("update endpointslice %s/%s: %w", s.ns, desired.Name, err))
		s.keepSlicePorts(existing)
	}
}

// sliceConflict handles a create refused because the name exists: ours but
// not cached yet (retry), or foreign (report, leave alone).
func (s *syncer) sliceConflict(desired *discoveryv1.EndpointSlice) {
	got, err := s.c.client.DiscoveryV1().EndpointSlices(s.ns).Get(s.ctx, desired.Name, metav1.GetOptions{})
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("create endpointslice %s/%s: exists, and get: %w", s.ns, desired.Name, err))
		return
	}
	if _, owned := ownedKey(got); owned {
		// Made by an earlier sync, not cached yet: its informer event
		// enqueues the key again.
		s.logger.V(4).Info("EndpointSlice exists but is not cached yet", "endpointslice", klog.KObj(got))
		return
	}
	conflictsTotal.WithLabelValues("endpointslices").Inc()
	s.status.reason = ReasonNameTaken
	s.logger.Info("EndpointSlice name taken", "endpointslice", klog.KObj(got))
	s.c.recorder.Event(got, corev1.EventTypeWarning, ReasonNameTaken,
		fmt.Sprintf("Name wanted by the mirror of remote Service %s/%s/%s is taken by an EndpointSlice mcmirror does not manage; leaving it alone", s.cluster, s.ns, s.name))
}

// sliceNeedsUpdate compares the fields the controller owns.
func sliceNeedsUpdate(existing, desired *discoveryv1.EndpointSlice) bool {
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return true
		}
	}
	return !apiequality.Semantic.DeepEqual(existing.OwnerReferences, desired.OwnerReferences) ||
		!apiequality.Semantic.DeepEqual(existing.Endpoints, desired.Endpoints) ||
		!apiequality.Semantic.DeepEqual(existing.Ports, desired.Ports)
}

// setStatus records a key's result and refreshes the gauges of its
// cluster.
func (c *Controller) setStatus(key string, st keyStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.status[key]
	if st.services == 0 && st.pods == 0 && st.reason == "" {
		delete(c.status, key)
	} else {
		c.status[key] = st
	}
	clusters := map[string]bool{st.cluster: true}
	if had {
		clusters[old.cluster] = true
	}
	for cl := range clusters {
		var svcs, pods int
		reasons := map[string]int{}
		for _, s := range c.status {
			if s.cluster != cl {
				continue
			}
			svcs += s.services
			pods += s.pods
			if s.reason != "" {
				reasons[s.reason]++
			}
		}
		mirrorsGauge.WithLabelValues(cl, "service").Set(float64(svcs))
		mirrorsGauge.WithLabelValues(cl, "pod").Set(float64(pods))
		for _, r := range []string{ReasonNameTaken, ReasonNameTooLong, ReasonHeadlessWithoutPorts, ReasonExternalName, ReasonNamespaceMissing, ReasonPortsExhausted} {
			notMirroredGauge.WithLabelValues(cl, r).Set(float64(reasons[r]))
		}
	}
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// foreignSliceRecheck is when a key whose EndpointSlice name is held by a
// foreign slice looks again: the informer sees only the controller's own
// slices, so the foreign one's deletion enqueues nothing.
const foreignSliceRecheck = time.Minute

// sync makes the local mirrors of one exported Service (key
// cluster/namespace/service) what the remote cluster says they should be,
// and writes only the difference. It runs in three steps: plan (plan.go,
// slices.go: pure), writes (apply.go: Services, then EndpointSlices), and
// garbage collection and port release (collect.go) of only what the
// earlier steps accounted for.
func (c *Controller) sync(ctx context.Context, key string) error {
	start := c.now()
	defer func() { syncDuration.Observe(time.Since(start).Seconds()) }()
	logger := klog.FromContext(ctx).WithValues("key", key)

	cluster, ns, name, err := splitKey(key)
	if err != nil {
		logger.Error(err, "Dropping a malformed key")
		return nil
	}
	// Every sync ends with one line that says what it did: how many
	// writes, or why it left the key alone.
	skipped := ""
	var s *syncer
	defer func() {
		if skipped != "" {
			logger.V(4).Info("Synced", "writes", 0, "skipped", skipped)
		} else if s != nil {
			logger.V(4).Info("Synced", "writes", s.writes, "errors", len(s.errs))
		}
	}()
	r, keepFor := c.link(cluster)
	var remote *corev1.Service
	var remoteSlices []*discoveryv1.EndpointSlice
	switch {
	case r != nil && !r.synced.Load():
		// The link's sync enqueues every key of the cluster again.
		skipped = "link not synced"
		return nil
	case r == nil && keepFor > 0:
		skipped = "link removed, within the grace"
		c.queue.AddAfter(key, keepFor)
		return nil
	case r == nil && !c.linkSourcesSynced():
		// Maybe a link not read yet, not an orphan: ask again later.
		skipped = "link sources not read yet"
		c.queue.AddAfter(key, time.Second)
		return nil
	case r == nil && c.heldByRefusedLink(ctx, cluster):
		// A link Secret that names the cluster exists but cannot be
		// used: an unreachable link, not a removed one.
		skipped = "link secret refused"
		c.queue.AddAfter(key, refusedRecheck)
		return nil
	case r != nil:
		// Exported by the export selector, or else by a ServiceExport's
		// stamp; neither (a label removed), it is unexported.
		remote = r.exportedService(ns, name)
		remoteSlices = r.slicesOf(ns, name)
	}

	s = &syncer{c: c, ctx: ctx, logger: logger, key: key, cluster: cluster, ns: ns, name: name,
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
	// final is what the cluster holds of the key's objects after the
	// writes, as far as the sync knows.
	final ledger
	// keepPorts are the port owners of the wanted mirrors.
	keepPorts map[string]bool
	// requeueAfter, when positive, asks for a later sync.
	requeueAfter time.Duration
	// writes counts the API writes made.
	writes int
	status keyStatus
	errs   []error
}

func (s *syncer) run() error {
	c := s.c
	s.ownedServices = map[string]*corev1.Service{}
	s.ownedSlices = map[string]*discoveryv1.EndpointSlice{}
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
	s.final = ledger{services: maps.Clone(s.ownedServices), slices: maps.Clone(s.ownedSlices)}

	// Step 1: the plan, from the caches.
	c.mu.Lock()
	c.forgetWanted(s.key)
	delete(c.starved, s.key)
	in := planInput{
		cluster: s.cluster, ns: s.ns, name: s.name, remote: s.remote, remoteSlices: s.remoteSlices,
		owned: s.ownedServices, taken: s.taken, now: c.now(),
		podGrace: c.opts.PodGrace, missing: c.missing[s.key],
		headlessGrace: c.opts.HeadlessGrace, hostlessSince: c.hostless[s.key],
	}
	c.mu.Unlock()
	in.egressFamilies = egressFamilies(s.egress)
	p := planServices(in)
	s.remember(p)
	defer func() {
		if s.requeueAfter > 0 {
			c.queue.AddAfter(s.key, s.requeueAfter)
		}
	}()

	if p.shape != shapeNone && !s.namespaceReady() {
		// Nothing is written nor deleted: the namespace and what is in
		// it are going, or were never there. Ports no object records
		// (none, in a namespace that does not exist) are released.
		s.releasePorts()
		return errors.Join(s.errs...)
	}

	// Step 2: writes. Services first: the headless mirror's
	// EndpointSlices need the per-pod ClusterIPs.
	s.applyFamilies(p.wants)
	live := s.applyServices(p.wants)
	desired, known := planSlices(sliceInput{cluster: s.cluster, ns: s.ns, name: s.name, plan: p, live: live,
		owned: s.ownedSlices, egress: s.egress, maxEndpoints: c.maxEndpoints,
		flat: c.opts.FlatEndpoints, remoteSlices: s.remoteSlices})
	for _, name := range slices.Sorted(maps.Keys(desired)) {
		s.applySlice(desired[name])
	}

	// Step 3: what is no longer wanted, and only what was accounted for.
	s.collect(garbage(p, s.ownedServices, s.ownedSlices, desired, known))
	s.releasePorts()
	return errors.Join(s.errs...)
}

// applyFamilies updates, in place, the IP family policy of the existing
// egress mirrors the plan gives another: SingleStack to PreferDualStack
// (the API server adds the second family and its ClusterIP) or back (it
// releases them). The primary family is never changed here: a mirror
// whose primary family must change is replaced (replaceReason). It runs
// before applyServices, which then sees the updated mirror; a failed
// update leaves the mirror as it was, with the slices of its families.
func (s *syncer) applyFamilies(wants []want) {
	for _, w := range wants {
		existing, desired := s.ownedServices[w.svc.Name], w.svc
		if existing == nil || !w.egress || desired.Spec.IPFamilyPolicy == nil || replaceReason(existing, desired) != "" ||
			existing.Spec.IPFamilyPolicy != nil && *existing.Spec.IPFamilyPolicy == *desired.Spec.IPFamilyPolicy {
			continue
		}
		updated := existing.DeepCopy()
		updated.Spec.IPFamilyPolicy = desired.Spec.IPFamilyPolicy
		u, err := s.c.client.CoreV1().Services(s.ns).Update(s.ctx, updated, metav1.UpdateOptions{})
		s.wrote("update", "services", desired.Name, err)
		if err != nil {
			continue
		}
		s.logger.V(2).Info("Changed the IP families of mirror", "service", klog.KObj(u),
			"ipFamilyPolicy", *desired.Spec.IPFamilyPolicy, "ipFamilies", u.Spec.IPFamilies, "clusterIPs", u.Spec.ClusterIPs)
		s.ownedServices[u.Name] = u
		s.final.services[u.Name] = u
	}
}

// taken returns the local Service called name in the key's namespace when
// it is not one of the key's own.
func (s *syncer) taken(name string) *corev1.Service {
	if _, ours := s.ownedServices[name]; ours {
		return nil
	}
	obj, ok, _ := s.c.services.GetStore().GetByKey(s.ns + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Service)
}

// remember records the plan's notices, conflicts and grace state.
func (s *syncer) remember(p plan) {
	for _, n := range p.notices {
		s.notMirrored(n)
	}
	for _, obj := range p.conflicts {
		s.conflict(obj)
	}
	c := s.c
	c.mu.Lock()
	if len(p.missing) > 0 {
		c.missing[s.key] = p.missing
	} else {
		delete(c.missing, s.key)
	}
	if !p.hostlessSince.IsZero() {
		c.hostless[s.key] = p.hostlessSince
	} else {
		delete(c.hostless, s.key)
	}
	c.mu.Unlock()
	s.requeue(p.requeueAfter)
}

func (s *syncer) requeue(d time.Duration) {
	if d > 0 && (s.requeueAfter == 0 || d < s.requeueAfter) {
		s.requeueAfter = d
	}
}

// namespaceReady reports whether mirrors can be written in the namespace,
// creating it when allowed.
func (s *syncer) namespaceReady() bool {
	c := s.c
	nsRef := &corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: s.ns}
	obj, exists, _ := c.namespaces.GetStore().GetByKey(s.ns)
	if exists {
		if obj.(*corev1.Namespace).DeletionTimestamp == nil {
			return true
		}
		s.notMirrored(notice{ReasonNamespaceMissing, fmt.Sprintf("Namespace %s is being deleted: remote Service %s/%s/%s is not mirrored", s.ns, s.cluster, s.ns, s.name), nsRef})
		return false
	}
	if !c.opts.CreateNamespaces {
		s.notMirrored(notice{ReasonNamespaceMissing, fmt.Sprintf("Namespace %s does not exist (and --create-namespaces is off): remote Service %s/%s/%s is not mirrored", s.ns, s.cluster, s.ns, s.name), nsRef})
		return false
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: map[string]string{labels.ManagedBy: labels.ManagedByValue}}}
	_, err := c.client.CoreV1().Namespaces().Create(s.ctx, nsObj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	s.wrote("create", "namespaces", s.ns, err)
	if err != nil {
		return false
	}
	s.logger.Info("Created namespace", "namespace", s.ns)
	return true
}

// notMirrored records why (part of) the remote Service is not mirrored:
// an Event, the status gauge, a log line.
func (s *syncer) notMirrored(n notice) {
	s.status.reason = n.reason
	s.logger.Info("Not mirrored", "reason", n.reason, "message", n.msg)
	s.c.recorder.Event(n.ref, corev1.EventTypeWarning, n.reason, n.msg)
}

// conflict reports a wanted name held by an object the controller must not
// touch for this key, and remembers the key, so that the name's release
// syncs it again.
func (s *syncer) conflict(obj *corev1.Service) {
	conflictsTotal.WithLabelValues("services").Inc()
	s.status.reason = ReasonNameTaken
	s.c.mu.Lock()
	s.c.addWanted(obj.Namespace+"/"+obj.Name, s.key)
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
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: s.ns, Name: desired.Name}
	if existing != nil {
		ref.UID = existing.UID
	}
	s.c.recorder.Event(ref, corev1.EventTypeWarning, ReasonPortsExhausted, msg)
}

// portOwner names one port of one mirror Service for the allocator.
func portOwner(ns, svc, portKey string) string { return ns + "/" + svc + "/" + portKey }

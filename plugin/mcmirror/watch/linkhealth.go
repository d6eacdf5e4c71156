package watch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcmirror/mcmirror/internal/remote"
)

// The watches of a cluster, for the health of each: per way of export
// (remote.Way, in the order of serviceStores) its Services and their
// EndpointSlices, then the local cluster's mirrors and derived Services.
const (
	watchServices    = iota // the export selector's Services
	watchSlices             // their EndpointSlices
	watchMCSServices        // the Services a ServiceExport stamped
	watchMCSSlices
	watchFedServices // the members of federated Services
	watchFedSlices
	watchMirrors      // local cluster only
	watchDerived      // the derived Services of ServiceImports; local, with clusterset
	watchMirrorSlices // the mirrors' EndpointSlices; local, in import mode
	numWatches
)

// watchNames names the watches in the log.
var watchNames = func() []string {
	var names []string
	for _, w := range []remote.Way{{Name: "Services"}, remote.Stamped, remote.Federated} {
		names = append(names, w.Name, w.SlicesName())
	}
	return append(names, "mirror Services", "derived Services", "mirror EndpointSlices")
}()

// linkHealth is the state of one generation of a cluster's watches (a
// replaced link has two while the new one syncs): whether they work
// (remote.Health), whether its names are withdrawn for being older than
// stale_max_age. Only the generation that serves the cluster writes its
// gauges, so that two generations never fight over them; once the cluster
// is removed, no generation writes any of its series again.
type linkHealth struct {
	name  string
	local bool
	// derived: the cluster's derived Services are watched (the local
	// cluster, with clusterset), and counted; imported: the mirrors'
	// EndpointSlices are (the local cluster, in import mode).
	derived, imported bool
	// maxAge is stale_max_age: how long the names of a linked cluster
	// whose watches fail keep being answered; 0 is forever.
	maxAge time.Duration
	// expire is called when the names are withdrawn (true) or come back
	// (false): the cluster's groups are rebuilt.
	expire func(withdrawn bool)
	// core is whether each list and watch is answered.
	core *remote.Health

	mu sync.Mutex
	// owner: this generation serves the cluster and writes its gauges.
	owner bool
	// gone: the cluster was removed, or this generation was replaced or
	// stopped; it writes nothing.
	gone    bool
	synced  bool
	objects [len(objKinds)]int64 // objects held, by kind
	timer   *time.Timer          // the stale_max_age timer of a failure
	// withdrawn: stale for longer than maxAge; read without mu by the
	// source methods.
	withdrawn atomic.Bool
}

func newLinkHealth(name string, local bool, maxAge time.Duration, expire func(bool)) *linkHealth {
	if local {
		maxAge = 0 // the local cluster's state is never withdrawn
	}
	seriesWatched(name)
	h := &linkHealth{name: name, local: local, maxAge: maxAge, expire: expire}
	h.core = remote.NewHealth(name, watchNames, remote.Hooks{
		Failed:  func(reason string) { linkErrors.WithLabelValues(name, reason).Inc() },
		Down:    h.down,
		Up:      h.upAgain,
		Changed: h.changed,
	})
	return h
}

// own makes h the generation that serves its cluster and writes its
// gauges: at once, so that they show h's state, not a predecessor's.
func (h *linkHealth) own() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return
	}
	h.owner = true
	h.publish()
}

// publish writes every gauge from h's state; with h.mu held.
func (h *linkHealth) publish() {
	if !h.owner || h.gone {
		return
	}
	linkSynced.WithLabelValues(h.name).Set(b2f(h.synced))
	linkUp.WithLabelValues(h.name).Set(b2f(h.core.Up()))
	linkWithdrawn.WithLabelValues(h.name).Set(b2f(h.withdrawn.Load()))
	if last := h.core.Last(); !last.IsZero() {
		linkLastSync.WithLabelValues(h.name).Set(float64(last.UnixNano()) / 1e9)
	}
	for i, k := range objKinds {
		if i == objMirror && !h.local || i == objDerived && !h.derived || i == objMirrorSlice && !h.imported {
			continue
		}
		linkObjects.WithLabelValues(h.name, k).Set(float64(h.objects[i]))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stop makes h write nothing more; with removed (the cluster is unlinked)
// the cluster's series are deleted too, and without, once no instance
// watches the cluster any more (linkseries.go).
func (h *linkHealth) stop(removed bool) {
	h.core.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	live := !h.gone
	h.gone, h.owner = true, false
	if h.timer != nil {
		h.timer.Stop()
	}
	seriesUnwatched(h.name, live, removed)
}

// setSynced records that every watch has listed once.
func (h *linkHealth) setSynced() {
	h.core.Contact()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.synced = true
	h.publish()
}

// contact records a sign of life: an event or a bookmark.
func (h *linkHealth) contact() {
	h.core.Contact()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner && !h.gone {
		linkLastSync.WithLabelValues(h.name).Set(float64(h.core.Last().UnixNano()) / 1e9)
	}
}

// latency observes the programming latency of a change of the cluster.
func (h *linkHealth) latency(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.gone {
		programmingLatency.WithLabelValues(h.name).Observe(d.Seconds())
	}
}

// counted changes the number of objects of kind held by delta.
func (h *linkHealth) counted(kind int, delta int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.objects[kind] += delta
	if h.owner && !h.gone {
		linkObjects.WithLabelValues(h.name, objKinds[kind]).Set(float64(h.objects[kind]))
	}
}

// down logs a watch that fails, once per reason, and from the first
// failure of a synced link times its withdrawal.
func (h *linkHealth) down(watch, reason string, err error, first bool) {
	log.Warningf("%s is down (%s): listing %s: %v; serving its last known state", h.what(), reason, watch, err)
	if !first {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.maxAge <= 0 || !h.synced { // a link never synced has nothing to withdraw
		return
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	since := h.core.Since()
	h.timer = time.AfterFunc(h.maxAge, func() { h.expired(since) })
}

// upAgain logs a link that answers again, and answers its names again.
func (h *linkHealth) upAgain(downFor time.Duration) {
	if downFor == 0 {
		return // the first time up
	}
	log.Infof("%s is up again after %s: answering from its watches", h.what(), downFor.Round(time.Second))
	h.mu.Lock()
	if h.timer != nil {
		h.timer.Stop()
	}
	back := h.withdrawn.Swap(false)
	h.mu.Unlock()
	if back {
		log.Infof("Link %s: its names are answered again", h.name)
		h.expire(false)
	}
}

// changed publishes the gauges after a result.
func (h *linkHealth) changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publish()
}

// what names the cluster in the log.
func (h *linkHealth) what() string {
	if h.local {
		return "Local cluster " + h.name
	}
	return "Link " + h.name
}

// expired withdraws the names of a link that has failed since since, if it
// still does.
func (h *linkHealth) expired(since time.Time) {
	h.mu.Lock()
	if h.gone || h.core.Up() || !h.core.Since().Equal(since) || h.withdrawn.Load() {
		h.mu.Unlock()
		return
	}
	h.withdrawn.Store(true)
	h.publish()
	h.mu.Unlock()
	log.Warningf("Link %s: down for %s, longer than stale_max_age %s: its names are withdrawn until it answers again", h.name, time.Since(since).Round(time.Second), h.maxAge)
	h.expire(true)
}

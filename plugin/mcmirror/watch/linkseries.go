package watch

import (
	"sync"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
)

// The lifetime of a cluster's series across plugin instances. The series
// are the process's, not an instance's: a reload starts the new instance's
// watches before it stops the old instance's, so a cluster both configure
// keeps its series and its counters. A cluster only the old one linked
// loses them once nobody watches it and some instance knows every link it
// will have (its link Secrets read): before that, a link Secret not read
// yet may still bring the cluster back.
var linkSeries = struct {
	sync.Mutex
	// live counts the generations of each cluster's watches that have
	// not stopped, in every instance.
	live map[string]int
	// orphans are the clusters nobody watches any more whose series wait
	// for an instance that knows its links.
	orphans map[string]bool
	// ready counts the running instances that know their links.
	ready int
}{live: map[string]int{}, orphans: map[string]bool{}}

// seriesWatched records a new generation of the watches of cluster name.
func seriesWatched(name string) {
	linkSeries.Lock()
	defer linkSeries.Unlock()
	linkSeries.live[name]++
	delete(linkSeries.orphans, name)
}

// seriesUnwatched records that a generation of name stopped (live: it had
// not stopped before); removed says the cluster was unlinked, not only its
// instance stopped or the generation replaced.
func seriesUnwatched(name string, live, removed bool) {
	linkSeries.Lock()
	defer linkSeries.Unlock()
	if live {
		linkSeries.live[name]--
	}
	if linkSeries.live[name] > 0 {
		return
	}
	delete(linkSeries.live, name)
	if removed || linkSeries.ready > 0 {
		deleteLinkSeries(name)
		return
	}
	linkSeries.orphans[name] = true
}

// instanceReady records that an instance knows every link it has: the
// series of the clusters nobody watches go.
func instanceReady() {
	linkSeries.Lock()
	defer linkSeries.Unlock()
	linkSeries.ready++
	for name := range linkSeries.orphans {
		deleteLinkSeries(name)
	}
	clear(linkSeries.orphans)
}

// instanceStopped undoes instanceReady when that instance stops.
func instanceStopped() {
	linkSeries.Lock()
	defer linkSeries.Unlock()
	linkSeries.ready--
}

// deleteLinkSeries deletes every series of cluster name.
func deleteLinkSeries(name string) {
	linkSynced.DeleteLabelValues(name)
	linkUp.DeleteLabelValues(name)
	linkWithdrawn.DeleteLabelValues(name)
	linkLastSync.DeleteLabelValues(name)
	for _, r := range link.FailureReasons {
		linkErrors.DeleteLabelValues(name, r)
	}
	index.DeleteSeries(name)
	programmingLatency.DeleteLabelValues(name)
	for _, k := range objKinds {
		linkObjects.DeleteLabelValues(name, k)
	}
}

package controller

// Imports and the links that have not synced. An import's part from a
// linked cluster is known only once that link's informers have listed:
// before, a sync would drop the cluster's slice (and, were it the only
// source, the ServiceImport and its ClusterSetIP). So an import whose
// existing ServiceImport or slices name a cluster whose link has not
// synced waits, and only that import: the others, those whose only
// source is local included, go on. The wait is bounded by
// --link-startup-timeout from the link's start (for a cluster no link
// names yet while the link Secrets are still being read, from the
// controller's start). After it, the import goes on with what the synced
// sources say, and keeps the late cluster's slices as they last were
// (and the cluster in its status): a link that cannot be reached at
// start-up is taken as one that failed after its sync, whose last state
// is kept too, rather than as a removed one, whose part goes at once.
// Deleting would be worse than staleness: a ClusterSetIP given up is
// given to nobody again, and the cluster's endpoints may well still
// serve while only its API server cannot be reached. An import with no
// synced source at all is left exactly as it is. Once the link syncs,
// every import is synced again, and the cluster's part is its own again.

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// linkState is what one MCS sync knows of the links, read with its
// sources (importSources).
type linkState struct {
	// waiting are the links that have not synced, each with the end of
	// its start-up wait.
	waiting map[string]time.Time
	// linked are the names of every link, synced or not.
	linked map[string]bool
	// sourcesUntil is, while the link Secrets have not all been read,
	// the end of the wait for them (until then a cluster no link names
	// may be one of theirs); zero once they have been.
	sourcesUntil time.Time
}

// importHeld defers an import until the links it waits for have synced
// or their start-up wait is over; the key is synced again after.
type importHeld struct{ after time.Duration }

func (e importHeld) Error() string {
	return fmt.Sprintf("waiting up to %s for links that have not synced", e.after.Round(time.Millisecond))
}

// heldClusters returns the clusters of have (those an existing import
// names) whose part cannot be known yet, and when the last of their
// waits ends.
func (c *Controller) heldClusters(ls linkState, have []string) (held []string, until time.Time) {
	for _, h := range have {
		end, waiting := ls.waiting[h]
		if !waiting && (h == c.opts.Cluster || ls.linked[h] || ls.sourcesUntil.IsZero()) {
			continue
		}
		if !waiting {
			end = ls.sourcesUntil
		}
		if !slices.Contains(held, h) {
			held = append(held, h)
		}
		if end.After(until) {
			until = end
		}
	}
	return held, until
}

// existingClusters are the clusters an existing import names: in its
// status, and in the source-cluster label of its slices (by name).
func existingClusters(si *mcsv1beta1.ServiceImport, existing map[string]*discoveryv1.EndpointSlice) []string {
	var out []string
	if si != nil {
		for _, c := range si.Status.Clusters {
			out = append(out, c.Cluster)
		}
	}
	for _, es := range existing {
		if c := es.Labels[mcsv1beta1.LabelSourceCluster]; c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// keptSlices are the existing slices of the held clusters, by cluster;
// each held cluster has an entry, with or without slices.
func keptSlices(held []string, existing map[string]*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	out := make(map[string][]*discoveryv1.EndpointSlice, len(held))
	for _, h := range held {
		out[h] = nil
	}
	for _, es := range existing {
		if c := es.Labels[mcsv1beta1.LabelSourceCluster]; slices.Contains(held, c) {
			out[c] = append(out[c], es)
		}
	}
	return out
}

// noteKept tells, once per import and cluster until the cluster's link
// syncs, that the import goes on keeping the cluster's part as it last
// was: an Event on the ServiceImport, and the log.
func (c *Controller) noteKept(si *mcsv1beta1.ServiceImport, held []string) {
	key := si.Namespace + "/" + si.Name
	for _, h := range held {
		c.mu.Lock()
		if c.keptNoted[h] == nil {
			c.keptNoted[h] = map[string]bool{}
		}
		seen := c.keptNoted[h][key]
		c.keptNoted[h][key] = true
		c.mu.Unlock()
		if seen {
			continue
		}
		klog.InfoS("Import goes on without a link that has not synced; its part is kept as it last was", "serviceImport", klog.KObj(si), "cluster", h)
		c.recorder.Eventf(mcsRef("ServiceImport", si), corev1.EventTypeWarning, ReasonImportSourceNotSynced,
			"Linked cluster %s has not synced within --link-startup-timeout (%s): this import goes on with the other clusters, and keeps %s's endpoints as they last were until its link syncs (see link_synced and the controller's log)",
			h, c.opts.LinkStartupTimeout, h)
	}
}

// linkStartupExpired is called when link r's start-up wait ends: if it
// has not synced, the imports it takes part in go on without it.
func (c *Controller) linkStartupExpired(r *remoteCluster) {
	if cur, _ := c.links.Get(r.name); cur != r || r.synced.Load() {
		return
	}
	linkStartupTimeouts.WithLabelValues(r.name).Inc()
	klog.InfoS("Link has not synced within the start-up timeout: the imports it takes part in go on, keeping its part as it last was", "cluster", r.name, "timeout", c.opts.LinkStartupTimeout)
	c.enqueueMCS()
}

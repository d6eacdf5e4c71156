package controller

// The health of a link: whether its lists and watches are answered, why
// not, and since when; in link_up and link_errors_total, and one log line
// per change.

import (
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"

	"k8s.io/klog/v2"
)

// The watches of a link.
const (
	watchServices = iota
	watchSlices
	// watchServiceExports is the Services a ServiceExport stamped
	// (labels.ServiceExportSelector).
	watchServiceExports
	numWatches
)

var watchNames = [numWatches]string{"Services", "EndpointSlices", "ServiceExport Services"}

// linkHealth is the state of one link's watches. A replaced link's
// health stops writing once its successor runs; a removed link's series
// are deleted.
type linkHealth struct {
	name string
	// noAnswer is how long a request may go unanswered before the link
	// counts as unreachable (noAnswerAfter).
	noAnswer time.Duration

	mu sync.Mutex
	// gone: the link was replaced or removed; its late results are not
	// written.
	gone bool
	// answered: some list or watch was answered, so the link can be up.
	answered bool
	// failing is the reason each watch fails, "" while it works.
	failing [numWatches]string
	// since is when the link went down, for the log line of its return.
	since time.Time
}

// newLinkHealth returns the health of link name. A first link of the name
// starts down with every error reason at 0; a replacement leaves the
// series as its predecessor wrote them until its own first result.
func newLinkHealth(name string, replacement bool) *linkHealth {
	if !replacement {
		linkUp.WithLabelValues(name).Set(0)
		for _, r := range link.FailureReasons {
			linkErrors.WithLabelValues(name, r)
		}
	}
	return &linkHealth{name: name, noAnswer: noAnswerAfter}
}

// up reports whether every watch works; with h.mu held.
func (h *linkHealth) up() bool {
	return h.answered && h.failing == [numWatches]string{}
}

// result records the outcome of a list or watch of watch w. Each failure
// is counted; a link going down (or failing for another reason) and its
// return are logged once, not every retry.
func (h *linkHealth) result(w int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return
	}
	wasUp := h.up()
	if err == nil {
		h.failing[w] = ""
		h.answered = true
		if h.up() && !wasUp {
			if h.since.IsZero() {
				klog.InfoS("Link up", "cluster", h.name)
			} else {
				klog.InfoS("Link up again", "cluster", h.name, "after", time.Since(h.since).Round(time.Second))
			}
			h.since = time.Time{}
		}
	} else {
		reason := link.FailureReason(err)
		linkErrors.WithLabelValues(h.name, reason).Inc()
		if h.since.IsZero() {
			h.since = time.Now()
		}
		if h.failing[w] != reason {
			h.failing[w] = reason
			klog.ErrorS(err, "Link down: retrying; its mirrors are kept", "cluster", h.name, "reason", reason, "watch", watchNames[w])
		}
	}
	linkUp.WithLabelValues(h.name).Set(b2f(h.up()))
}

// stop makes h write nothing more; with deleteSeries (the link is
// removed) the link's series are deleted too.
func (h *linkHealth) stop(deleteSeries bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
	if !deleteSeries {
		return
	}
	linkUp.DeleteLabelValues(h.name)
	for _, r := range link.FailureReasons {
		linkErrors.DeleteLabelValues(h.name, r)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

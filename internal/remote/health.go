package remote

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
)

// Hooks are told of a Health's changes, one call at a time and in order,
// without the Health's lock: they may read it (Up, Last, Since), not
// report to it. Each is optional.
type Hooks struct {
	// Failed is told of every failed request, by reason
	// (link.FailureReason): for link_errors_total.
	Failed func(reason string)
	// Down is told when a watch starts failing, or fails for another
	// reason than before: once, not at every retry. first says the
	// cluster had no failing watch until now.
	Down func(watch, reason string, err error, first bool)
	// Up is told when every watch works again; downFor is how long it
	// failed, 0 the first time the cluster is up.
	Up func(downFor time.Duration)
	// Changed is told after every result: for the gauges.
	Changed func()
}

// Health is the state of one generation of a cluster's watches: whether
// each list and watch is answered, why not, and since when. A replaced or
// removed cluster's Health is stopped and reports nothing more.
type Health struct {
	name    string
	watches []string
	// noAnswer is how long a request may go unanswered before the
	// cluster counts as unreachable (NoAnswerAfter when made).
	noAnswer time.Duration
	hooks    Hooks

	// report serialises results with their hooks, so that hooks are told
	// in the order the results came.
	report sync.Mutex

	mu sync.Mutex
	// gone: stopped; late results are not recorded.
	gone bool
	// answered: some list or watch was answered, so the cluster can be up.
	answered bool
	// failing is the reason each watch fails, "" while it works.
	failing []string
	// since is when the first watch began to fail; zero while up.
	since time.Time
	// last is the last sign of life: an answer, an event, a bookmark.
	last time.Time
}

// NewHealth returns the health of the watches of cluster name, one per
// entry of watches (their names, for the log).
func NewHealth(name string, watches []string, hooks Hooks) *Health {
	return &Health{name: name, watches: watches, noAnswer: NoAnswerAfter, hooks: hooks, failing: make([]string, len(watches))}
}

// Name is the cluster's name.
func (h *Health) Name() string { return h.name }

// Up reports whether every watch works, and one was answered.
func (h *Health) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up()
}

func (h *Health) up() bool {
	return h.answered && !slices.ContainsFunc(h.failing, func(r string) bool { return r != "" })
}

// Since is when the cluster began to fail; zero while it does not.
func (h *Health) Since() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since
}

// Last is the last sign of life of the cluster; zero before the first.
func (h *Health) Last() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Contact records a sign of life: an event or a bookmark.
func (h *Health) Contact() {
	h.mu.Lock()
	h.last = time.Now()
	h.mu.Unlock()
}

// Stop makes h record and report nothing more.
func (h *Health) Stop() {
	h.report.Lock()
	defer h.report.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
}

// Result records the outcome of a list or watch of watch w.
func (h *Health) Result(w int, err error) {
	h.report.Lock()
	defer h.report.Unlock()
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return
	}
	wasUp := h.up()
	var calls []func()
	if err == nil {
		h.failing[w] = ""
		h.answered = true
		h.last = time.Now()
		if h.up() && !wasUp {
			var downFor time.Duration
			if !h.since.IsZero() {
				downFor = time.Since(h.since)
			}
			h.since = time.Time{}
			if h.hooks.Up != nil {
				calls = append(calls, func() { h.hooks.Up(downFor) })
			}
		}
	} else {
		reason := link.FailureReason(err)
		if h.hooks.Failed != nil {
			calls = append(calls, func() { h.hooks.Failed(reason) })
		}
		first := h.since.IsZero()
		if first {
			h.since = time.Now()
		}
		if h.failing[w] != reason {
			h.failing[w] = reason
			if h.hooks.Down != nil {
				what := h.watches[w]
				calls = append(calls, func() { h.hooks.Down(what, reason, err, first) })
			}
		}
	}
	h.mu.Unlock()
	for _, call := range calls {
		call()
	}
	if h.hooks.Changed != nil {
		h.hooks.Changed()
	}
}

// request reports the cluster unreachable each noAnswer that the request
// of watch w starting now goes unanswered (client-go retries a watch whose
// TLS handshake times out for minutes before it returns); the returned
// function reports its outcome when it ends. Nothing is reported once ctx
// ends: the watch is stopping.
func (h *Health) request(ctx context.Context, w int) func(error) {
	var mu sync.Mutex
	ended := false
	report := func(err error) {
		if err != nil && ctx.Err() != nil {
			return
		}
		h.Result(w, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var t *time.Timer
	t = time.AfterFunc(h.noAnswer, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			report(fmt.Errorf("no answer within %s", h.noAnswer))
			t.Reset(h.noAnswer)
		}
	})
	return func(err error) {
		mu.Lock()
		ended = true
		t.Stop()
		mu.Unlock()
		report(err)
	}
}

// retried runs request until it is answered with something other than
// unreachable or refused, or ctx ends, Backoff apart; each attempt is
// reported to h as watch w. Other answers (a 410 Expired, a 429) go to the
// caller, a reflector, which handles them.
func retried[T any](ctx context.Context, h *Health, w int, request func() (T, error)) (T, error) {
	backoff := Backoff
	for {
		done := h.request(ctx, w)
		v, err := request()
		done(err)
		if err == nil || ctx.Err() != nil || link.FailureReason(err) == link.FailureError {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff.Step()):
		}
	}
}

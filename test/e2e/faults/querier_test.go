package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

// What the querier holds a DNS server to, and what it only counts.
//
// The promise under a fault is about answers: every answer is the right
// one, never SERVFAIL, never another rcode, never other addresses, and the
// server answers. Those are checked strictly: one wrong answer fails the
// test.
//
// A UDP query that gets no reply within the client's 2 s is another thing.
// The server is a race-built process on a machine that, in CI, runs API
// servers, etcd and the test at once: a scheduling stall of a couple of
// seconds happens there without any defect, and the query is lost to it,
// as a real client's would be, which retries. So does the querier: a query
// that times out is asked again, up to queryTries times in all. One that a
// retry answers right is slow, not wrong: counted, logged, and bounded
// (slowBound), so that a server that stalls often still fails. One that no
// try answers (6 s without a reply) is a server that does not answer: that
// fails the test like a wrong answer. A reply that comes, wrong, on any try
// is a wrong answer.
const (
	// queryTries is how many times a query that times out is asked.
	queryTries = 3
	// queryTimeout is the client's timeout of one try.
	queryTimeout = 2 * time.Second
)

// slowBound is the most slow answers (timed out, then answered right by a
// retry) a run of the querier of length d may have: one for every 10 s,
// and two more. Each costs the querier 2 s; a server that stalls for a
// tenth of the time is not a starved machine's doing.
func slowBound(d time.Duration) int { return 2 + int(d/(10*time.Second)) }

// querier asks a DNS server for a fixed set of names, one after another,
// without pause, until stopped, and records every answer: right, slow
// (right after a timeout), or wrong (see above).
type querier struct {
	server *harness.DNSServer
	want   map[string][]string // name → sorted A records
	start  time.Time

	mu          sync.Mutex
	asked       int
	slow        int
	bad         int
	samples     []string // the first wrong answers
	slowSamples []string // the first slow ones
	lastOK      map[string]time.Time
	firstNo     map[string]time.Time // first wrong answer, per name

	cancel context.CancelFunc
	done   chan struct{}
}

// queryStats is what a querier saw.
type queryStats struct {
	asked, slow, bad     int
	samples, slowSamples []string
	took                 time.Duration
}

// query starts a querier of s; want is what every name must keep
// answering.
func query(s *harness.DNSServer, want map[string][]string) *querier {
	ctx, cancel := context.WithCancel(context.Background())
	q := &querier{server: s, want: want, cancel: cancel, done: make(chan struct{}), start: time.Now(),
		lastOK: map[string]time.Time{}, firstNo: map[string]time.Time{}}
	names := slices.Sorted(maps.Keys(want))
	go func() {
		defer close(q.done)
		for ctx.Err() == nil {
			for _, n := range names {
				q.check(ctx, n)
			}
			time.Sleep(20 * time.Millisecond) // ~50 rounds a second, leaving CPU to the rest
		}
	}()
	return q
}

// timedOut reports whether err is a try that got no reply in time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (q *querier) check(ctx context.Context, name string) {
	var (
		r       *dns.Msg
		err     error
		timeout int
	)
	for try := 1; try <= queryTries; try++ {
		r, err = ask(q.server, name, dns.TypeA)
		if !timedOut(err) || ctx.Err() != nil {
			break
		}
		timeout++
	}
	if ctx.Err() != nil && timedOut(err) {
		return // stopped while waiting: no verdict
	}
	now := time.Now()
	var why string
	switch {
	case timedOut(err):
		why = fmt.Sprintf("no reply to %d tries of %v", queryTries, queryTimeout)
	case err != nil:
		why = err.Error()
	case r.Rcode != dns.RcodeSuccess:
		why = dns.RcodeToString[r.Rcode]
	case !slices.Equal(harness.Answers(r), q.want[name]):
		why = fmt.Sprintf("%v, want %v", harness.Answers(r), q.want[name])
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked++
	if why == "" {
		q.lastOK[name] = now
		if timeout > 0 {
			q.slow++
			if len(q.slowSamples) < 10 {
				q.slowSamples = append(q.slowSamples, fmt.Sprintf("%s %s: right after %d timeouts", now.Format("15:04:05.000"), name, timeout))
			}
		}
		return
	}
	q.bad++
	if _, ok := q.firstNo[name]; !ok {
		q.firstNo[name] = now
	}
	if len(q.samples) < 10 {
		q.samples = append(q.samples, fmt.Sprintf("%s %s: %s", now.Format("15:04:05.000"), name, why))
	}
}

// stop stops the querier and returns what it saw.
func (q *querier) stop() queryStats {
	q.cancel()
	<-q.done
	return q.stats()
}

// stats returns what it saw so far.
func (q *querier) stats() queryStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queryStats{asked: q.asked, slow: q.slow, bad: q.bad,
		samples: slices.Clone(q.samples), slowSamples: slices.Clone(q.slowSamples), took: time.Since(q.start)}
}

// answeredSince waits until every name has been answered right after
// since: positive evidence that the querier asks and the server answers
// up to that moment, not only that counters stayed at zero.
func (q *querier) answeredSince(t *testing.T, since time.Time, what string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		q.mu.Lock()
		defer q.mu.Unlock()
		for name := range q.want {
			assert.True(c, q.lastOK[name].After(since), "%s answered right after %s", name, since.Format("15:04:05.000"))
		}
	}, 3*queryTries*queryTimeout, 100*time.Millisecond, "%s: every name answered", what)
}

// requireRight fails t on any wrong answer or unanswered query, and when
// slow answers exceed slowBound; it logs what it saw.
func (st queryStats) requireRight(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s: %d queries in %v, %d wrong, %d slow (right after a timeout; at most %d allowed)",
		what, st.asked, st.took.Round(time.Second), st.bad, st.slow, slowBound(st.took))
	if st.slow > 0 {
		t.Logf("slow answers, the first ones: %v", st.slowSamples)
	}
	assert.Zero(t, st.bad, "%s: every answer right, and every query answered: %v", what, st.samples)
	assert.LessOrEqual(t, st.slow, slowBound(st.took), "%s: queries answered only by a retry: %v", what, st.slowSamples)
}

package faults_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/mcmirror/mcmirror/test/harness"
)

// querier asks a DNS server for a fixed set of names, one after another,
// without pause, until stopped, and records every answer that is not the
// one expected: an error, a timeout, another rcode, other addresses.
type querier struct {
	server *harness.DNSServer
	want   map[string][]string // name → sorted A records

	mu      sync.Mutex
	asked   int
	bad     int
	samples []string // the first bad answers
	lastOK  map[string]time.Time
	firstNo map[string]time.Time // first answer without records, per name

	cancel context.CancelFunc
	done   chan struct{}
}

// query starts a querier of s; want is what every name must keep
// answering.
func query(s *harness.DNSServer, want map[string][]string) *querier {
	ctx, cancel := context.WithCancel(context.Background())
	q := &querier{server: s, want: want, cancel: cancel, done: make(chan struct{}),
		lastOK: map[string]time.Time{}, firstNo: map[string]time.Time{}}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	go func() {
		defer close(q.done)
		for ctx.Err() == nil {
			for _, n := range names {
				q.check(n)
			}
			time.Sleep(20 * time.Millisecond) // ~50 rounds a second, leaving CPU to the rest
		}
	}()
	return q
}

func (q *querier) check(name string) {
	r, err := ask(q.server, name, dns.TypeA)
	now := time.Now()
	var why string
	switch {
	case err != nil:
		why = err.Error()
	case r.Rcode != dns.RcodeSuccess:
		why = dns.RcodeToString[r.Rcode]
	case !slices.Equal(addrs(r), q.want[name]):
		why = fmt.Sprintf("%v, want %v", addrs(r), q.want[name])
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked++
	if why == "" {
		q.lastOK[name] = now
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

// stop stops the querier and returns how many queries it sent, how many
// got a wrong answer, and the first wrong ones.
func (q *querier) stop() (asked, bad int, samples []string) {
	q.cancel()
	<-q.done
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.asked, q.bad, q.samples
}

// stats returns the counters so far.
func (q *querier) stats() (asked, bad int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.asked, q.bad
}

package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/mcmirror/mcmirror/internal/fleet"
)

// question is one name of cluster c and the addresses it must answer.
type question struct {
	name string
	want []string // sorted
}

// podQuestion is endpoint j of Service i of cluster c.
func (f *fleetData) podQuestion(c, i, j int) question {
	return question{
		name: fmt.Sprintf("%s.%s-%s.%s.svc.cluster.local.", hostName(j), svcName(i), f.name(c), ns),
		want: []string{f.addr(c, i, j)},
	}
}

// svcQuestion is Service i of cluster c: every endpoint's address.
func (f *fleetData) svcQuestion(c, i int) question {
	q := question{name: fmt.Sprintf("%s-%s.%s.svc.cluster.local.", svcName(i), f.name(c), ns)}
	for j := range f.cfg.endpoints {
		q.want = append(q.want, f.addr(c, i, j))
	}
	sort.Strings(q.want)
	return q
}

// randomQuestion is a pod or Service name of cluster c, at random.
func (f *fleetData) randomQuestion(c int) question {
	i := rand.IntN(f.cfg.services)
	if rand.IntN(2) == 0 {
		return f.svcQuestion(c, i)
	}
	return f.podQuestion(c, i, rand.IntN(f.cfg.endpoints))
}

// ask sends q's A query to addr; answered is false when no reply came.
// Replies of many addresses go over TCP.
func ask(addr string, q question) (got []string, rcode int, answered bool) {
	m := new(dns.Msg)
	m.SetQuestion(q.name, dns.TypeA)
	m.SetEdns0(4096, false)
	cl := &dns.Client{Timeout: 2 * time.Second}
	if len(q.want) > 100 {
		cl.Net = "tcp"
	}
	r, _, err := cl.Exchange(m, addr)
	if err != nil {
		return nil, -1, false
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	sort.Strings(got)
	return got, r.Rcode, true
}

// right reports whether the reply is q's answer.
func right(q question, got []string, rcode int) bool {
	return rcode == dns.RcodeSuccess && slices.Equal(got, q.want)
}

// checkResult counts checked answers.
type checkResult struct {
	asked, wrong, unanswered int
	firstWrong               string
}

func (r *checkResult) add(o checkResult) {
	r.asked += o.asked
	r.wrong += o.wrong
	r.unanswered += o.unanswered
	if r.firstWrong == "" {
		r.firstWrong = o.firstWrong
	}
}

// checkOne asks q at addr and counts the answer.
func checkOne(addr string, q question) checkResult {
	got, rcode, ok := ask(addr, q)
	switch {
	case !ok:
		return checkResult{asked: 1, unanswered: 1}
	case !right(q, got, rcode):
		return checkResult{asked: 1, wrong: 1, firstWrong: fmt.Sprintf("%s at %s: %s %v, want %v", q.name, addr, dns.RcodeToString[rcode], got, q.want)}
	}
	return checkResult{asked: 1}
}

// sampleCheck asks every replica of d cfg.samples names of every other
// cluster (half Service names, half pod names) and checks each answer.
func (f *fleetData) sampleCheck(d *deployment) checkResult {
	var mu sync.Mutex
	var total checkResult
	fleet.Each(len(d.replicas), 16, func(ri int) {
		r := d.replicas[ri]
		var res checkResult
		for c := range f.clusters {
			if c == r.cluster {
				continue
			}
			for k := range f.cfg.samples {
				i := rand.IntN(f.cfg.services)
				q := f.svcQuestion(c, i)
				if k%2 == 1 {
					q = f.podQuestion(c, i, rand.IntN(f.cfg.endpoints))
				}
				res.add(checkOne(r.dns.Addr, q))
			}
		}
		mu.Lock()
		total.add(res)
		mu.Unlock()
	})
	return total
}

// prober asks random names of other clusters of random replicas of d
// until stopped, and counts the answers: the wrong answers while
// something is broken.
type prober struct {
	stopc chan struct{}
	done  chan checkResult
}

func (f *fleetData) startProber(d *deployment) *prober {
	p := &prober{stopc: make(chan struct{}), done: make(chan checkResult, 1)}
	go func() {
		var res checkResult
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-p.stopc:
						return
					default:
					}
					r := d.replicas[rand.IntN(len(d.replicas))]
					c := (r.cluster + 1 + rand.IntN(len(f.clusters)-1)) % len(f.clusters)
					one := checkOne(r.dns.Addr, f.randomQuestion(c))
					mu.Lock()
					res.add(one)
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		p.done <- res
	}()
	return p
}

func (p *prober) stop() checkResult {
	close(p.stopc)
	return <-p.done
}

// propagation changes an endpoint of a Service of each cluster in turn,
// cfg.changes times, and times each change from the update request to the
// moment every replica of every other cluster answers the new address.
func (f *fleetData) propagation(d *deployment) ([]time.Duration, error) {
	var lat []time.Duration
	for k := range f.cfg.changes {
		c := k % len(f.clusters)
		i, addr, t0, err := f.change(c)
		if err != nil {
			return lat, fmt.Errorf("change %d in %s: %w", k, f.name(c), err)
		}
		q := question{name: f.podQuestion(c, i, 0).name, want: []string{addr}}
		var last atomic.Int64
		var failed atomic.Int32
		var wg sync.WaitGroup
		for _, r := range d.replicas {
			if r.cluster == c {
				continue
			}
			wg.Go(func() {
				for deadline := t0.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if got, rcode, ok := ask(r.dns.Addr, q); ok && right(q, got, rcode) {
						d := int64(time.Since(t0))
						for {
							old := last.Load()
							if d <= old || last.CompareAndSwap(old, d) {
								return
							}
						}
					}
				}
				failed.Add(1)
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			return lat, fmt.Errorf("change %d (%s of %s): %d replicas did not answer %s within 60s", k, svcName(i), f.name(c), n, addr)
		}
		lat = append(lat, time.Duration(last.Load()))
	}
	return lat, nil
}

// percentile is the p-th percentile (0..1) of l, by rank.
func percentile(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return slices.Sorted(slices.Values(l))[min(len(l)-1, int(p*float64(len(l))))]
}

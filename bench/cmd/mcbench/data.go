package main

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/bench/internal/kube"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// setLabel is the label that tells the data sets apart, so that each server
// under test selects exactly its own exports (export_selector).
const setLabel = "mcbench"

// Data sets. Every Service is headless with one port (http 80) and manual
// EndpointSlices of named, ready endpoints: what a StatefulSet makes, without
// the cost of pods.
//
//	ten  (A10): Service s<i> in each of the 10 remote clusters c0..c9, one
//	            endpoint h<c> in cluster c: 10 endpoints per Service in total.
//	one  (A1):  Service s<i> in c0 only, with the 10 endpoints h0..h9.
//	loc  (B):   Service s<i> in the local cluster east (not exported), with
//	            the 10 endpoints h0..h9 and the same IPs as ten.
//	mem:        Service m<i> in each remote cluster, 100 endpoints in one
//	            slice: the memory measurement.
const (
	nsTen  = "ten"
	nsOne  = "one"
	nsLoc  = "loc"
	nsMem  = "mem"
	nsProp = "ten" // the propagation Services live with the ten set
	nsGW   = "gw"
	perSvc = 10 // endpoints per Service, for every throughput layout
)

const zone = "svc.cluster.local."

// ipTen is the IP of endpoint h<c> of s<i> in the ten layout (and of h<c>
// in loc).
func ipTen(c, i int) string { return fmt.Sprintf("10.%d.%d.%d", 200+c, i/250, 1+i%250) }

// ipOne is the IP of endpoint h<j> of s<i> in the one layout.
func ipOne(i, j int) string {
	n := i*perSvc + j
	return fmt.Sprintf("10.250.%d.%d", n/250, 1+n%250)
}

// ipMem is the IP of endpoint e<j> of m<i> in cluster c.
func ipMem(c, i, j int) string {
	n := i*100 + j
	return fmt.Sprintf("10.%d.%d.%d", 200+c, 64+n/250, 1+n%250)
}

// names maps each name of a layout to its sorted A answer.
type names map[string][]string

// expect returns the names of Services s0..s<n-1> of perSvc endpoints each
// and their addresses: host(i, j) names endpoint j of Service i, svc(i) the
// Service, and ip(i, j) is the endpoint's address.
func expect(n int, host func(i, j int) string, svc func(i int) string, ip func(i, j int) string) names {
	out := names{}
	for i := range n {
		var all []string
		for j := range perSvc {
			out[host(i, j)] = []string{ip(i, j)}
			all = append(all, ip(i, j))
		}
		slices.Sort(all)
		out[svc(i)] = all
	}
	return out
}

// expectTen returns the names of s0..s<n-1> in the ten layout: endpoint j
// of every Service lives in cluster cj.
func expectTen(n int) names {
	return expect(n,
		func(i, j int) string { return fmt.Sprintf("h%d.s%d-c%d.%s.%s", j, i, j, nsTen, zone) },
		func(i int) string { return fmt.Sprintf("s%d-global.%s.%s", i, nsTen, zone) },
		func(i, j int) string { return ipTen(j, i) })
}

// expectOne returns the names of the same records all in cluster c0.
func expectOne(n int) names {
	return expect(n,
		func(i, j int) string { return fmt.Sprintf("h%d.s%d-c0.%s.%s", j, i, nsOne, zone) },
		func(i int) string { return fmt.Sprintf("s%d-global.%s.%s", i, nsOne, zone) },
		ipOne)
}

// expectLoc returns the names of the same records as local headless
// Services, for the kubernetes plugin.
func expectLoc(n int) names {
	return expect(n,
		func(i, j int) string { return fmt.Sprintf("h%d.s%d.%s.%s", j, i, nsLoc, zone) },
		func(i int) string { return fmt.Sprintf("s%d.%s.%s", i, nsLoc, zone) },
		func(i, j int) string { return ipTen(j, i) })
}

func (m names) sorted() []string { return slices.Sorted(maps.Keys(m)) }

func fastClient(c *harness.Cluster) kubernetes.Interface { return kube.FastClient(c.Config) }

// creator creates objects with a few concurrent workers.
type creator struct {
	clients map[string]kubernetes.Interface
	jobs    chan func(context.Context) error
	wg      sync.WaitGroup
	errMu   sync.Mutex
	err     error
	n       atomic.Int64
}

func newCreator(clusters []*harness.Cluster, workers int) *creator {
	cr := &creator{clients: map[string]kubernetes.Interface{}, jobs: make(chan func(context.Context) error, 256)}
	for _, c := range clusters {
		cr.clients[c.Name] = fastClient(c)
	}
	for range workers {
		cr.wg.Go(func() {
			for j := range cr.jobs {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := j(ctx)
				cancel()
				if err != nil {
					cr.errMu.Lock()
					if cr.err == nil {
						cr.err = err
					}
					cr.errMu.Unlock()
				}
				cr.n.Add(1)
			}
		})
	}
	return cr
}

// wait waits for every queued job and returns the first error.
func (cr *creator) wait() error {
	close(cr.jobs)
	cr.wg.Wait()
	return cr.err
}

// headless queues a headless Service and its slice, in that order.
func (cr *creator) headless(cluster, ns, name string, lbl map[string]string, eps []kube.Endpoint) {
	cs := cr.clients[cluster]
	cr.jobs <- func(ctx context.Context) error {
		if err := kube.Headless(ctx, cs, ns, name, "mcbench", lbl, eps); err != nil {
			return fmt.Errorf("%s: %w", cluster, err)
		}
		return nil
	}
}

func exportLabels(set string) map[string]string {
	return map[string]string{labels.Exported: labels.ExportFlat, setLabel: set}
}

// loadThroughput creates s<from>..s<to-1> of the ten, one and loc layouts.
func loadThroughput(env *harness.Env, from, to int) (int64, error) {
	cr := newCreator(env.Clusters(), 12)
	for i := from; i < to; i++ {
		name := fmt.Sprintf("s%d", i)
		var loc, one []kube.Endpoint
		for c := range perSvc {
			loc = append(loc, kube.Endpoint{Host: fmt.Sprintf("h%d", c), IP: ipTen(c, i)})
			one = append(one, kube.Endpoint{Host: fmt.Sprintf("h%d", c), IP: ipOne(i, c)})
		}
		cr.headless("east", nsLoc, name, nil, loc)
		cr.headless("c0", nsOne, name, exportLabels("one"), one)
		for c := range 10 {
			cr.headless(fmt.Sprintf("c%d", c), nsTen, name, exportLabels("ten"),
				[]kube.Endpoint{{Host: fmt.Sprintf("h%d", c), IP: ipTen(c, i)}})
		}
	}
	err := cr.wait()
	return cr.n.Load() * 2, err
}

// namespaces creates the namespaces of every data set in every cluster.
func namespaces(env *harness.Env) error {
	for _, c := range env.Clusters() {
		cs := fastClient(c)
		for _, ns := range []string{nsTen, nsOne, nsLoc, nsMem, nsGW, nsGWT, nsCold} {
			if err := kube.Namespace(cs, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadMem creates m<from>..m<to-1> in every remote cluster: 100 endpoints
// each.
func loadMem(env *harness.Env, from, to int) error {
	cr := newCreator(env.Clusters(), 12)
	for c := range 10 {
		for i := from; i < to; i++ {
			eps := make([]kube.Endpoint, 100)
			for j := range eps {
				eps[j] = kube.Endpoint{Host: fmt.Sprintf("e%d", j), IP: ipMem(c, i, j)}
			}
			cr.headless(fmt.Sprintf("c%d", c), nsMem, fmt.Sprintf("m%d", i), exportLabels("mem"), eps)
		}
	}
	return cr.wait()
}

func inCIDR(p netip.Prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && p.Contains(a)
}

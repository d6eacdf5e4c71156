package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/bench/internal/kube"
	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// The cold set: Service k<i> in each of c0..c9, flat-mode export, headless,
// one named endpoint h0. A fresh A server with the 10 links is started on
// it and timed from its start until its index holds every name; the time a
// plain client-go List of the same objects takes, in the same run, is
// subtracted: what is left is what the server adds to the lists.
const nsCold = "cold"

// ipCold is the IP of h0 of k<i> in cluster c.
func ipCold(c, i int) string { return fmt.Sprintf("10.%d.%d.%d", 210+c, i/250, 1+i%250) }

func expectCold(n int) names {
	return expect(n,
		func(i, c int) string { return fmt.Sprintf("h0.k%d-c%d.%s.%s", i, c, nsCold, zone) },
		func(i int) string { return fmt.Sprintf("k%d-global.%s.%s", i, nsCold, zone) },
		func(i, c int) string { return ipCold(c, i) })
}

// loadCold creates k0..k<n-1> in every remote cluster.
func loadCold(env *harness.Env, n int) error {
	cr := newCreator(env.Clusters(), 16)
	for i := range n {
		for c := range 10 {
			cr.headless(fmt.Sprintf("c%d", c), nsCold, fmt.Sprintf("k%d", i), exportLabels(nsCold),
				[]kube.Endpoint{{Host: "h0", IP: ipCold(c, i)}})
		}
	}
	return cr.wait()
}

// coldResult is the cold-start measure.
type coldResult struct {
	svcs    int           // exported Services in all
	objects int           // objects the lists returned, all clusters
	lists   time.Duration // the slowest cluster's lists, client-go, one after the other as the plugin makes them
	index   time.Duration // process start to the index holding every name
	correct time.Duration // process start to every name verified correct (upper bound: includes the verification)
	names   int
	inuse   int64 // HeapInuse after a forced GC, once every name is correct
	// profile is the top of the CPU profile of the start (from the
	// pprof listener's first answer, cfg.coldProfile long), or why not;
	// profAt is when it began, after the process start.
	profile string
	profAt  time.Duration
	relist  *relistResult
	// relistErr says why the relist was not measured.
	relistErr string
}

// timeLists lists, from every cluster at once, what an A server with the 10
// links lists: in each remote cluster the exported Services, then every
// EndpointSlice of a Service; in east the same and the mirror Services. It
// returns the time of the slowest cluster and the number of objects.
func timeLists(env *harness.Env, sel string) (time.Duration, int, error) {
	var (
		mu    sync.Mutex
		worst time.Duration
		total int
		first error
		wg    sync.WaitGroup
	)
	for _, c := range env.Clusters() {
		cs := fastClient(c)
		wg.Go(func() {
			n, d, err := listCluster(cs, sel, c.Name == "east")
			mu.Lock()
			defer mu.Unlock()
			worst, total = max(worst, d), total+n
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %w", c.Name, err)
			}
		})
	}
	wg.Wait()
	return worst, total, first
}

func listCluster(cs kubernetes.Interface, sel string, local bool) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t := time.Now()
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, 0, err
	}
	sls, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: labels.ServiceName})
	if err != nil {
		return 0, 0, err
	}
	n := len(svcs.Items) + len(sls.Items)
	if local {
		m, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: labels.MirrorSelector})
		if err != nil {
			return 0, 0, err
		}
		n += len(m.Items)
	}
	return n, time.Since(t), nil
}

var reIndexNames = regexp.MustCompile(`(?m)^coredns_mcmirror_index_names (\S+)$`)

// indexNames reads the plugin's coredns_mcmirror_index_names gauge; -1
// when the server does not answer yet.
func indexNames(url string) float64 { return metricValue(scrape(url), reIndexNames) }

// coldStart loads the cold set (n Services per remote cluster), times the
// lists, then starts a fresh A server with the 10 links and times it.
func coldStart(env *harness.Env, cfg *config, n int) (*coldResult, error) {
	t := time.Now()
	if err := loadCold(env, n); err != nil {
		return nil, fmt.Errorf("loading: %w", err)
	}
	logf("cold start: loaded k0..k%d in 10 clusters (%d objects) in %.1fs", n-1, 20*n, time.Since(t).Seconds())
	sel := labels.Exported + "=" + labels.ExportFlat + "," + setLabel + "=" + nsCold
	r := &coldResult{svcs: 10 * n}
	// Twice, the second counted: the first warms the API servers' caches
	// as the servers started before have.
	for range 2 {
		var err error
		if r.lists, r.objects, err = timeLists(env, sel); err != nil {
			return nil, fmt.Errorf("lists: %w", err)
		}
	}
	logf("cold start: client-go lists of %d objects: slowest cluster %.2fs", r.objects, r.lists.Seconds())

	expect := expectCold(n)
	r.names = len(expect)
	mport := freePort()
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)
	pport := freePort()
	pprofURL := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pport)
	corefile := strings.Replace(mcmirrorCorefile(env, remotes(10), sel), "    {PPROF}\n",
		fmt.Sprintf("    pprof 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n", pport, mport), 1)

	// The gauge, polled from before the start; names only grow in a cold
	// start, so the first sample at the final value is when the index was
	// complete.
	type sample struct {
		at time.Duration
		v  float64
	}
	var samples []sample
	stop := make(chan struct{})
	polled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			v := indexNames(metrics)
			samples = append(samples, sample{time.Since(start), v})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	profiled := make(chan string, 1)
	go func() { profiled <- profileStart(pprofURL, cfg, start, &r.profAt) }()
	s, err := startServer(cfg.out, serverOpts{key: "Acold", what: "cold start", bin: cfg.cmc, args: []string{"-conf", "{CONF}"},
		expect: expect, cpu: serverCPU, corefile: corefile})
	r.correct = time.Since(start)
	close(stop)
	<-polled
	if err != nil {
		return nil, err
	}
	defer s.proc.Stop()
	s.pprof = pprofURL
	r.profile = <-profiled
	final := indexNames(metrics)
	if final <= 0 {
		return nil, fmt.Errorf("no coredns_mcmirror_index_names from %s", metrics)
	}
	r.index = r.correct // unless sampled at the final value before the verification ended
	if i := slices.IndexFunc(samples, func(x sample) bool { return x.v == final }); i >= 0 {
		r.index = samples[i].at
	}
	if r.inuse, _, _, err = s.heap(30 * time.Second); err != nil {
		return nil, fmt.Errorf("heap: %w", err)
	}
	logf("cold start: %d names; index complete %.2fs after the start, every name verified by %.2fs; lists %.2fs",
		r.names, r.index.Seconds(), r.correct.Seconds(), r.lists.Seconds())
	if cfg.relist {
		if r.relist, err = relist(env, cfg, s, metrics, final); err != nil {
			logf("relist: %v", err)
			r.relistErr = err.Error()
		}
	}
	return r, nil
}

// profileStart takes a CPU profile of the server starting at pprofURL,
// from the first moment its pprof listener answers (the pprof plugin
// starts before mcmirror, whose start waits for the lists), and returns
// the top of it. at is set to when the profile began, after start.
func profileStart(pprofURL string, cfg *config, start time.Time, at *time.Duration) string {
	path := filepath.Join(cfg.out, "cold.cpu.pprof")
	url := fmt.Sprintf("%s/profile?seconds=%d", pprofURL, int(cfg.coldProfile.Seconds()))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		t := time.Now()
		err := proc.Fetch(url, path)
		if err == nil {
			*at = t.Sub(start)
			break
		}
		if time.Now().After(deadline) {
			return "profile failed: " + err.Error()
		}
	}
	var tops []string
	for _, args := range [][]string{
		{"-nodecount=25"},
		{"-cum", "-nodecount=40"},
		// The same without the answers to mcbench's verification, which
		// starts once the server is ready and overlaps the profile's end.
		{"-cum", "-nodecount=40", "-ignore", "serveUDPPacket"},
	} {
		top, err := proc.Top(cfg.cmc, path, args...)
		if err != nil {
			return err.Error()
		}
		tops = append(tops, top)
	}
	return tops[0] + "\n--- by cumulative time (-cum):\n" + proc.Table(tops[1]) +
		"\n--- by cumulative time, the answers to the verification left out (-ignore serveUDPPacket):\n" + proc.Table(tops[2])
}

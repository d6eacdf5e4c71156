package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// The relist: on the cold-start server, loaded and idle, the 10 linked
// clusters' kube-apiservers are stopped and started again. A restarted
// kube-apiserver's watch cache starts at etcd's current revision, so the
// reflectors' resumed watches are refused with "too old resource version"
// and every link lists again, Services and EndpointSlices, while the old
// stores and index are still held: the worst case of memory. HeapInuse is
// sampled every 100 ms from /metrics through it.

// relistResult is the relist measure.
type relistResult struct {
	steady    int64         // HeapInuse after a forced GC, before the restart
	idlePeak  int64         // the largest HeapInuse sampled in the 3 s before the restart
	peak      int64         // the largest HeapInuse sampled from the restart to the end
	peakAt    time.Duration // after the API servers were stopped
	rss       int64         // VmRSS at the end of the idle samples, before the restart
	peakRSS   int64         // the largest VmRSS sampled from the restart to the end
	samples   int
	restart   time.Duration // stop and start of the 10 API servers
	done      time.Duration // stop to the end of the relist (reads quiet, every name back)
	coldRead  int64         // bytes the server read (rchar) from its start to the cold start's end
	read      int64         // bytes it read from the restart to the end of the relist
	lists     []string      // per cluster: LIST and watch-list requests of the two kinds the restarted API server served
	after     int64         // HeapInuse after a forced GC, after the relist
	namesBack bool          // coredns_mcmirror_index_names back at its value before the restart
	// readFrom and readTo are the first and the last sample that read
	// more than 256 KiB since the one before: how long the relists took
	// (the scrapes alone read about 10 KiB per sample).
	readFrom, readTo time.Duration
	// heapProfile is the top of the in-use heap profile after the relist
	// (forced GC): what is still held.
	heapProfile string
}

func (r *relistResult) ratio() float64 { return float64(r.peak) / float64(r.steady) }

// relisted says whether the server read at least half as much as in its
// cold start: a resumed watch reads next to nothing.
func (r *relistResult) relisted() bool { return r.read*2 >= r.coldRead }

var reHeapInuse = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)

// scrape returns the body at url; nil when it does not answer.
func scrape(url string) []byte {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	return b
}

// metricValue returns the value of the first match of re in b; -1 when
// there is none.
func metricValue(b []byte, re *regexp.Regexp) float64 {
	m := re.FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// rchar returns the bytes process pid has read (read system calls,
// sockets included) from /proc/PID/io.
func rchar(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no rchar in /proc/%d/io", pid)
}

// relist restarts the linked clusters' API servers under the loaded server
// s (its /metrics at metrics; names is the index_names value when loaded)
// and samples its heap through the relists that follow.
func relist(env *harness.Env, cfg *config, s *server, metrics string, names float64) (*relistResult, error) {
	r := &relistResult{}
	var err error
	if r.coldRead, err = rchar(s.proc.PID()); err != nil {
		return nil, err
	}
	if r.steady, _, _, err = s.heap(30 * time.Second); err != nil {
		return nil, fmt.Errorf("heap: %w", err)
	}
	for range 30 {
		r.idlePeak = max(r.idlePeak, int64(metricValue(scrape(metrics), reHeapInuse)))
		time.Sleep(100 * time.Millisecond)
	}
	// After the forced GC's pages have gone back to the system.
	if r.rss, err = proc.RSS(s.proc.PID()); err != nil {
		return nil, err
	}
	read0, err := rchar(s.proc.PID())
	if err != nil {
		return nil, err
	}

	// The sampler, from the stop of the first API server to the end; every
	// sample goes to relist.tsv: seconds, HeapInuse, bytes read since the
	// restart, index names.
	tsv, err := os.Create(filepath.Join(cfg.out, "relist.tsv"))
	if err != nil {
		return nil, err
	}
	defer tsv.Close()
	fmt.Fprintf(tsv, "seconds\theap_inuse_bytes\trss_bytes\tread_bytes\tindex_names\n")
	stop := make(chan struct{})
	sampled := make(chan struct{})
	start := time.Now()
	var mu sync.Mutex
	lastRead := int64(0)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			b := scrape(metrics)
			if v := metricValue(b, reHeapInuse); v > 0 {
				n, _ := rchar(s.proc.PID())
				rss, _ := proc.RSS(s.proc.PID())
				fmt.Fprintf(tsv, "%.2f\t%.0f\t%d\t%d\t%.0f\n", time.Since(start).Seconds(), v, rss, n-read0, metricValue(b, reIndexNames))
				mu.Lock()
				if n-read0-lastRead > 256<<10 {
					if r.readFrom == 0 {
						r.readFrom = time.Since(start)
					}
					r.readTo = time.Since(start)
				}
				lastRead = n - read0
				r.peakRSS = max(r.peakRSS, rss)
				r.samples++
				if int64(v) > r.peak {
					r.peak, r.peakAt = int64(v), time.Since(start)
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	finish := func() {
		close(stop)
		<-sampled
	}

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for _, c := range remotes(10) {
		wg.Go(func() {
			cl := env.Cluster(c)
			cl.StopAPIServer()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := cl.StartAPIServer(ctx); err != nil {
				errs <- fmt.Errorf("%s: restart kube-apiserver: %w", c, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	r.restart = time.Since(start)
	if err := <-errs; err != nil {
		finish()
		return nil, err
	}
	logf("relist: the 10 linked API servers restarted in %.1fs", r.restart.Seconds())

	// The end: every name back, and the reads quiet (under 1 MiB in 3 s:
	// the scrapes of /metrics alone read about 0.1 MiB a second) after the server has read at least half its cold start's worth;
	// or two minutes.
	last, quietSince := read0, time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if s.proc.Exited() {
			finish()
			return nil, fmt.Errorf("the server exited during the relist: %v", s.proc.Err())
		}
		n, err := rchar(s.proc.PID())
		if err != nil {
			finish()
			return nil, err
		}
		if n-last > 1<<20 {
			last, quietSince = n, time.Now()
		}
		r.read = n - read0
		r.namesBack = indexNames(metrics) == names
		if r.relisted() && r.namesBack && time.Since(quietSince) > 3*time.Second {
			break
		}
	}
	r.done = time.Since(start)
	finish()
	if time.Since(quietSince) <= 3*time.Second || !r.namesBack {
		logf("relist: not settled after two minutes (names back: %v, last read %.1fs ago)", r.namesBack, time.Since(quietSince).Seconds())
	}
	for _, c := range remotes(10) {
		r.lists = append(r.lists, c+": "+apiLists(env.Cluster(c)))
	}
	if r.after, _, _, err = s.heap(30 * time.Second); err != nil {
		return nil, fmt.Errorf("heap after: %w", err)
	}
	r.heapProfile = heapProfile(s, cfg, "relist.heap.pprof")
	logf("relist: the lists read from %.2fs to %.2fs after the stop (%.2fs, samples every 100 ms)", r.readFrom.Seconds(), r.readTo.Seconds(), (r.readTo - r.readFrom).Seconds())
	logf("relist: VmRSS %.1f MiB before, peak %.1f MiB (%.3fx)", mib(r.rss), mib(r.peakRSS), float64(r.peakRSS)/float64(r.rss))
	logf("relist: read %.1f MiB (cold start %.1f MiB) in %.1fs; HeapInuse steady %.1f MiB (idle samples up to %.1f), peak %.1f MiB at %.1fs (%d samples): %.3fx; after %.1f MiB; %s",
		mib(r.read), mib(r.coldRead), r.done.Seconds(), mib(r.steady), mib(r.idlePeak), mib(r.peak), r.peakAt.Seconds(), r.samples, r.ratio(), mib(r.after), strings.Join(r.lists, "; "))
	return r, nil
}

// apiLists returns what the restarted API server of c counted of lists of
// Services and EndpointSlices: LIST requests and watch-list streams (the
// reflectors' lists when the client and server have the WatchList
// feature). The metrics are the API server's since its restart.
func apiLists(c *harness.Cluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := fastClient(c).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "metrics: " + err.Error()
	}
	count := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		var kind string
		switch {
		case strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `verb="LIST"`):
			kind = "LIST"
		case strings.HasPrefix(l, "apiserver_watch_list_duration_seconds_count{"):
			kind = "watch-list"
		default:
			continue
		}
		for _, res := range []string{"services", "endpointslices"} {
			if strings.Contains(l, `resource="`+res+`"`) {
				f := strings.Fields(l)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				count[kind+" "+res] += v
			}
		}
	}
	return fmt.Sprintf("LIST services %.0f, endpointslices %.0f; watch-list services %.0f, endpointslices %.0f",
		count["LIST services"], count["LIST endpointslices"], count["watch-list services"], count["watch-list endpointslices"])
}

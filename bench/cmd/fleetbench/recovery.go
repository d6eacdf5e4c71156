package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// recovery is what a restart of API servers cost the fleet.
type recovery struct {
	down       time.Duration // stop requested → every one serving again
	healthy    time.Duration // every one serving again → every link synced and up
	errorsSeen float64       // link errors the processes counted meanwhile: proof they saw it
	peakLists  float64       // the largest LIST rate (per second, 2 s samples) the restarted servers served
	lists      float64       // LISTs they served from the stop until healthy
	probe      checkResult   // answers checked throughout
	err        string
}

// recover stops the API servers of clusters, starts them again, and times
// until every link of d is healthy, checking answers all along.
func (f *fleetData) recover(d *deployment, clusters []int) recovery {
	var rec recovery
	pl0, err := f.readAll(d)
	if err != nil {
		rec.err = err.Error()
		return rec
	}
	p := f.startProber(d)
	lists := f.startListRate(clusters)
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range clusters {
		wg.Go(func() {
			cl := f.clusters[c]
			cl.StopAPIServer()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := cl.StartAPIServer(ctx); err != nil {
				mu.Lock()
				rec.err = fmt.Sprintf("%s: restart kube-apiserver: %v", cl.Name, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	up := time.Now()
	rec.down = up.Sub(t0)
	if rec.err != "" {
		rec.probe = p.stop()
		rec.lists, rec.peakLists = lists.stop()
		return rec
	}
	var bad []string
	for deadline := up.Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		pl, err := f.readAll(d)
		if err != nil {
			bad = []string{err.Error()}
			continue
		}
		rec.errorsSeen = 0
		// A controller started again counts from 0.
		for i := range pl.dns {
			rec.errorsSeen += max(0, pl.dns[i].errors-pl0.dns[i].errors)
		}
		for i := range pl.ctl {
			rec.errorsSeen += max(0, pl.ctl[i].errors-pl0.ctl[i].errors)
		}
		// Healthy only once the restart was seen: a link error counted.
		if bad = f.unhealthy(d, pl); len(bad) == 0 && rec.errorsSeen > 0 {
			rec.healthy = time.Since(up)
			break
		}
	}
	rec.lists, rec.peakLists = lists.stop()
	rec.probe = p.stop()
	if rec.healthy == 0 {
		rec.err = fmt.Sprintf("links not healthy 5 minutes after the restart (link errors seen: %.0f): %s", rec.errorsSeen, abbrev(bad, 5))
	}
	logf("%s: restart of %d API servers: serving again after %.1fs, every link healthy %.1fs later; peak %.0f LIST/s; %d answers checked meanwhile, %d wrong, %d unanswered %s",
		d.m, len(clusters), rec.down.Seconds(), rec.healthy.Seconds(), rec.peakLists, rec.probe.asked, rec.probe.wrong, rec.probe.unanswered, rec.probe.firstWrong)
	return rec
}

// listRate samples, every 2 s, the LIST requests of linked resources the
// API servers of some clusters serve, across their restarts (a restarted
// server counts from 0).
type listRate struct {
	stopc chan struct{}
	done  chan [2]float64 // total, peak per second
}

func (f *fleetData) startListRate(clusters []int) *listRate {
	lr := &listRate{stopc: make(chan struct{}), done: make(chan [2]float64, 1)}
	go func() {
		prev := f.lists(clusters)
		total, peak := 0.0, 0.0
		for {
			select {
			case <-lr.stopc:
				lr.done <- [2]float64{total, peak}
				return
			case <-time.After(2 * time.Second):
			}
			now := f.lists(clusters)
			sum := 0.0
			for c, n := range now {
				if n < 0 {
					continue // not serving: counted at its next answer
				}
				d := n - prev[c]
				if prev[c] < 0 || d < 0 {
					d = n // restarted since the last sample
				}
				sum += d
				prev[c] = n
			}
			total += sum
			peak = max(peak, sum/2)
		}
	}()
	return lr
}

// stop returns the LISTs served while sampling and the peak rate.
func (lr *listRate) stop() (total, peak float64) {
	close(lr.stopc)
	r := <-lr.done
	return r[0], r[1]
}

// lists is the LIST count of linked resources of each API server of
// clusters, -1 for one that does not answer.
func (f *fleetData) lists(clusters []int) map[int]float64 {
	out := map[int]float64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range clusters {
		wg.Go(func() {
			n := -1.0
			if a, err := readAPI(f.clusters[c]); err == nil {
				n = a.lists
			}
			mu.Lock()
			out[c] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// sample is one value of a Prometheus text exposition: a histogram's or
// summary's _sum and _count are samples of their own names.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples is a parsed exposition.
type samples []sample

// parseSamples reads a Prometheus text exposition; one it cannot parse is
// an error.
func parseSamples(b []byte) (samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, slices.Collect(maps.Values(fams))...)
	var out samples
	for _, s := range vec {
		labels := map[string]string{}
		for k, v := range s.Metric {
			labels[string(k)] = string(v)
		}
		out = append(out, sample{string(s.Metric[model.MetricNameLabel]), labels, float64(s.Value)})
	}
	return out, err
}

// sum is the sum of the samples called name whose labels include every
// pair of match; a value of match that is "*" matches any, and "a|b"
// either.
func (ss samples) sum(name string, match map[string]string) float64 {
	t := 0.0
	for _, s := range ss {
		if s.name == name && s.matches(match) {
			t += s.value
		}
	}
	return t
}

// each returns the samples called name.
func (ss samples) each(name string) samples {
	var out samples
	for _, s := range ss {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

func (s sample) matches(match map[string]string) bool {
	for k, want := range match {
		got, ok := s.labels[k]
		if !ok {
			return false
		}
		if want == "*" {
			continue
		}
		if !strings.Contains("|"+want+"|", "|"+got+"|") {
			return false
		}
	}
	return true
}

// scrapeURL reads the exposition at url.
func scrapeURL(url string) (samples, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseSamples(b)
}

// scrapeAPI reads the API server's own /metrics, as its admin.
func scrapeAPI(c *harness.Cluster) (samples, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return parseSamples(b)
}

// The resources a link reads.
const linkedResources = "services|endpointslices"

// apiCounters is what one API server counted of the resources links
// read, and its CPU.
type apiCounters struct {
	watches    float64 // apiserver_longrunning_requests WATCH of them: connections
	lists      float64 // apiserver_request_total LIST of them, and watch-list streams (apiserver_watch_list_duration_seconds_count)
	listBytes  float64 // apiserver_response_sizes_sum LIST of them (a watch-list's objects are watch events)
	watchBytes float64 // apiserver_watch_events_sizes_sum of them
	writes     float64 // create, update, patch and delete of them
	writeBytes float64 // apiserver_request_body_size_bytes_sum of those writes
	cpu        float64 // CPU seconds of the process
}

func readAPI(c *harness.Cluster) (apiCounters, error) {
	ss, err := scrapeAPI(c)
	if err != nil {
		return apiCounters{}, err
	}
	var a apiCounters
	kinds := map[string]string{"kind": "Service|EndpointSlice"}
	a.watches = ss.sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": linkedResources})
	a.lists = ss.sum("apiserver_request_total", map[string]string{"verb": "LIST", "resource": linkedResources}) +
		ss.sum("apiserver_watch_list_duration_seconds_count", map[string]string{"resource": linkedResources})
	a.listBytes = ss.sum("apiserver_response_sizes_sum", map[string]string{"verb": "LIST", "resource": linkedResources})
	a.watchBytes = ss.sum("apiserver_watch_events_sizes_sum", kinds)
	a.writes = ss.sum("apiserver_request_total", map[string]string{"verb": "POST|PUT|PATCH|DELETE", "resource": linkedResources})
	a.writeBytes = ss.sum("apiserver_request_body_size_bytes_sum", map[string]string{"verb": "create|update|patch|delete", "resource": "services|endpointslices.discovery.k8s.io"})
	if p := c.APIServer(); p != nil {
		a.cpu = proc.CPUSeconds(p.PID)
	}
	return a, nil
}

// minus is a − b for the counters; the gauge (watches) is a's.
func (a apiCounters) minus(b apiCounters) apiCounters {
	return apiCounters{watches: a.watches,
		lists: a.lists - b.lists, listBytes: a.listBytes - b.listBytes,
		watchBytes: a.watchBytes - b.watchBytes,
		writes:     a.writes - b.writes, writeBytes: a.writeBytes - b.writeBytes, cpu: a.cpu - b.cpu}
}

// heapInuse is HeapInuse after a forced GC, read through the pprof plugin
// at addr (host:port).
func heapInuse(addr string) (int64, error) {
	inuse, _, err := proc.HeapStats("http://"+addr+"/debug/pprof", 60*time.Second)
	return inuse, err
}

// saveHeapProfile writes the heap profile of the pprof plugin at addr
// (host:port), after a forced GC, to path, for `go tool pprof`.
func saveHeapProfile(addr, path string) error {
	return proc.Fetch("http://"+addr+"/debug/pprof/heap?gc=1", path)
}

// etcdSize is etcd's database size in use, in bytes.
func etcdSize(env *harness.Env) float64 {
	ss, err := scrapeURL(env.EtcdURL() + "/metrics")
	if err != nil {
		return 0
	}
	return ss.sum("etcd_mvcc_db_total_size_in_use_in_bytes", nil)
}

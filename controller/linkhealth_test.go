package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote"
)

// How the fake API server answers.
const (
	answerOK           = iota
	answerUnauthorized // 401
	answerForbidden    // 403
	answerUnavailable  // 503
	answerHang         // accepts the request, never answers
)

// fakeAPIServer is a minimal API server on a real socket: it lists and
// watches (watch-list included) the Services and EndpointSlices it holds,
// or answers every request as mode says.
type fakeAPIServer struct {
	*httptest.Server
	mode     atomic.Int32
	requests atomic.Int32
	services []corev1.Service
}

func newFakeAPIServer(t *testing.T, mode int32, services ...corev1.Service) *fakeAPIServer {
	s := &fakeAPIServer{services: services}
	s.mode.Store(mode)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

func (s *fakeAPIServer) status(w http.ResponseWriter, code int, reason metav1.StatusReason) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: reason, Code: int32(code), Message: string(reason)})
}

func (s *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	switch s.mode.Load() {
	case answerUnauthorized:
		s.status(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
		return
	case answerForbidden:
		time.Sleep(400 * time.Millisecond) // TEMP: a slow answer
		s.status(w, http.StatusForbidden, metav1.StatusReasonForbidden)
		return
	case answerUnavailable:
		s.status(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable)
		return
	case answerHang:
		<-r.Context().Done()
		return
	}
	var kind, apiVersion string
	var items []any
	switch r.URL.Path {
	case "/api/v1/services":
		kind, apiVersion = "Service", "v1"
		for i := range s.services {
			items = append(items, &s.services[i])
		}
	case "/apis/discovery.k8s.io/v1/endpointslices":
		kind, apiVersion = "EndpointSlice", "discovery.k8s.io/v1"
	default:
		s.status(w, http.StatusNotFound, metav1.StatusReasonNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if r.URL.Query().Get("watch") != "true" {
		_ = enc.Encode(map[string]any{"kind": kind + "List", "apiVersion": apiVersion,
			"metadata": map[string]any{"resourceVersion": "1"}, "items": items})
		return
	}
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		for _, it := range items {
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": it})
		}
		_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{"kind": kind, "apiVersion": apiVersion,
			"metadata": map[string]any{"resourceVersion": "1", "annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}})
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// logLines collects the log for the test's duration, each line once.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count is the number of lines that hold every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			n++
		}
	}
	return n
}

func captureLog(t *testing.T) *logLines {
	l := &logLines{}
	// Every line reaches the INFO output; the others are dropped so
	// that each line is seen once.
	klog.SetOutputBySeverity("INFO", l)
	klog.SetOutputBySeverity("WARNING", discard{})
	klog.SetOutputBySeverity("ERROR", discard{})
	t.Cleanup(func() { klog.SetOutput(discard{}) })
	return l
}

// seriesOf reports whether the controller exports a link_up or
// link_errors_total series of cluster.
func seriesOf(t *testing.T, cluster string) int {
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	n := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "coredns_mcmirror_controller_link_up") &&
			!strings.HasPrefix(mf.GetName(), "coredns_mcmirror_controller_link_errors_total") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "cluster" && lp.GetValue() == cluster {
					n++
				}
			}
		}
	}
	return n
}

func exportedService(ns, name string) corev1.Service {
	return corev1.Service{
		TypeMeta:   metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1", Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

// A link whose API server refuses (401, 403), fails (503) or never
// answers is down in link_up, its failures counted by reason, and logged
// once per watch, not per retry; when it answers again it is up, logged
// once more, and its exports are seen; once removed, its series go.
func TestLinkHealth(t *testing.T) {
	defer func(d time.Duration) { remote.NoAnswerAfter = d }(remote.NoAnswerAfter)
	// failures is how many failures to wait for: a request that hangs is
	// reported by its watchdog, every noAnswer.
	const failures = 6
	for _, tc := range []struct {
		name   string
		mode   int32
		reason string
		// noAnswer is the watchdog's wait: short where the server hangs,
		// longer than the test where it answers, so that an answer slowed
		// by a loaded machine is never counted unreachable.
		noAnswer time.Duration
	}{
		{"refused401", answerUnauthorized, link.FailureUnauthorized, time.Minute},
		{"refused403", answerForbidden, link.FailureForbidden, time.Minute},
		{"unavailable", answerUnavailable, link.FailureUnreachable, time.Minute},
		{"hanging", answerHang, link.FailureUnreachable, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote.NoAnswerAfter = tc.noAnswer
			logs := captureLog(t)
			api := newFakeAPIServer(t, tc.mode, exportedService("default", "web"))
			f := newFixture(t, fixtureOptions{}, nil)
			cluster := "bad-" + strings.ToLower(tc.name)
			f.c.Add(cluster, &rest.Config{Host: api.URL}, link.Namespaces{})

			// Down: retried and counted, logged once per watch.
			require.Eventually(t, func() bool {
				return testutil.ToFloat64(linkErrors.WithLabelValues(cluster, tc.reason)) >= failures
			}, 20*time.Second, 10*time.Millisecond, "failures counted as %s", tc.reason)
			assert.Equal(t, float64(0), testutil.ToFloat64(linkUp.WithLabelValues(cluster)))
			for _, r := range link.FailureReasons {
				if r != tc.reason {
					assert.Zero(t, testutil.ToFloat64(linkErrors.WithLabelValues(cluster, r)), "reason %s", r)
				}
			}
			assert.Equal(t, len(watchNames(f.c.ways)), logs.count("Link down", fmt.Sprintf("cluster=%q", cluster), fmt.Sprintf("reason=%q", tc.reason)),
				"one line per watch, not one per retry")
			r, _ := f.c.link(cluster)
			require.NotNil(t, r)
			assert.False(t, r.synced.Load())

			// Back: up, logged once, and the export is seen without a
			// restart of the link.
			api.mode.Store(answerOK)
			api.CloseClientConnections() // a hanging request ends
			require.Eventually(t, func() bool {
				return r.synced.Load() && testutil.ToFloat64(linkUp.WithLabelValues(cluster)) == 1
			}, 10*time.Second, 10*time.Millisecond, "up again")
			assert.Equal(t, []string{"default/web"}, r.ways[0].services.GetStore().ListKeys())
			assert.Equal(t, 1, logs.count("Link up again", fmt.Sprintf("cluster=%q", cluster)))
			assert.Equal(t, len(watchNames(f.c.ways)), logs.count("Link down", fmt.Sprintf("cluster=%q", cluster)))

			f.c.Remove(cluster)
			assert.Zero(t, seriesOf(t, cluster), "a removed link's series are deleted")
		})
	}
}

// A replaced link keeps serving, and writing link_up, until its
// replacement has synced: a new kubeconfig that is refused costs nothing
// but its errors. One that works takes over, and the old link's late
// results write nothing.
func TestLinkHealthReplaced(t *testing.T) {
	api := newFakeAPIServer(t, answerOK)
	f := newFixture(t, fixtureOptions{}, nil)
	f.c.Add("replaced", &rest.Config{Host: api.URL}, link.Namespaces{})
	require.Eventually(t, func() bool { return testutil.ToFloat64(linkUp.WithLabelValues("replaced")) == 1 },
		10*time.Second, 10*time.Millisecond)
	old, _ := f.c.link("replaced")
	require.Eventually(t, old.HasSynced, 10*time.Second, 10*time.Millisecond)

	refusing := newFakeAPIServer(t, answerUnauthorized)
	f.c.Add("replaced", &rest.Config{Host: refusing.URL}, link.Namespaces{})
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(linkErrors.WithLabelValues("replaced", link.FailureUnauthorized)) > 0
	}, 10*time.Second, 10*time.Millisecond, "the new kubeconfig is tried")
	cur, _ := f.c.link("replaced")
	assert.Same(t, old, cur, "the old link serves while the new one cannot sync")
	assert.Equal(t, float64(1), testutil.ToFloat64(linkUp.WithLabelValues("replaced")))

	working := newFakeAPIServer(t, answerOK)
	f.c.Add("replaced", &rest.Config{Host: working.URL}, link.Namespaces{})
	require.Eventually(t, func() bool {
		cur, _ := f.c.link("replaced")
		return cur != old && cur.serving.Load()
	}, 10*time.Second, 10*time.Millisecond, "a replacement that syncs takes over")
	old.health.Result(0, errors.New("connection refused"))
	assert.Equal(t, float64(1), testutil.ToFloat64(linkUp.WithLabelValues("replaced")), "the old link's late results write nothing")
}

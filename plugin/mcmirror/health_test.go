package mcmirror

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/peers"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// peersServer serves GET /peers as the gateway's Prober does
// (peers.Encode). garbage, when set, is served instead.
type peersServer struct {
	*httptest.Server
	mu      sync.Mutex
	alive   map[string]bool
	garbage string
	reads   int
}

func newPeersServer(t *testing.T, alive map[string]bool) *peersServer {
	p := &peersServer{alive: alive}
	p.Server = httptest.NewServer(p)
	t.Cleanup(p.Close)
	return p
}

func (p *peersServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if p.garbage != "" {
		w.Write([]byte(p.garbage))
		return
	}
	states := map[string]peers.State{}
	for c, alive := range p.alive {
		st := peers.State{Alive: alive, Probed: true, Since: time.Now(), Latency: time.Millisecond}
		if !st.Alive {
			st.Error = "dial tcp: connection refused"
		}
		states[c] = st
	}
	w.Header().Set("Content-Type", "application/json")
	peers.Encode(w, states)
}

func (p *peersServer) set(cluster string, alive bool) {
	p.mu.Lock()
	p.alive[cluster] = alive
	p.mu.Unlock()
}

func (p *peersServer) serveGarbage(body string) {
	p.mu.Lock()
	p.garbage = body
	p.mu.Unlock()
}

func (p *peersServer) readCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// logRecorder is a logger that keeps what it is told.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Infof(f string, v ...any)    { l.add("INFO "+f, v...) }
func (l *logRecorder) Warningf(f string, v ...any) { l.add("WARNING "+f, v...) }
func (l *logRecorder) add(f string, v ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(f, v...))
	l.mu.Unlock()
}

// count returns how many lines contain s.
func (l *logRecorder) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// healthFixture is fixture's nginx-svc group, with a flat-mode cluster:
//
//	west:  headless nginx-svc (gateway): nginx-set-0, -1 with mirrors
//	       ClusterIP web (gateway); ClusterIP flat (flat mode)
//	paris: headless nginx-svc (gateway): nginx-set-0 with its mirror
//	tokyo: headless nginx-svc (flat mode): nginx-set-0
//	east:  headless nginx-svc exported, one pod
func healthFixture() *indextest.Source {
	f := indextest.NewSource("paris", "tokyo", "west")
	f.AddService("west", "default", "nginx-svc", labels.Gateway, nil, httpPort)
	f.AddSlice("west", "default", "nginx-svc", []object.Port{httpPort}, ep("nginx-set-0", "10.1.0.10", true), ep("nginx-set-1", "10.1.0.11", true))
	f.AddMirror("default", "nginx-svc-west", "west", "", nil, httpPort)
	f.AddMirror("default", "nginx-set-0-west", "west", "nginx-svc-west", []string{"10.96.0.10"}, httpPort)
	f.AddMirror("default", "nginx-set-1-west", "west", "nginx-svc-west", []string{"10.96.0.11"}, httpPort)
	f.AddService("west", "default", "web", labels.Gateway, []string{"10.100.0.1"}, httpPort)
	f.AddMirror("default", "web-west", "west", "", []string{"10.96.0.20"}, httpPort)
	f.AddService("west", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	f.AddSlice("west", "default", "flat", []object.Port{httpPort}, ep("", "10.1.0.30", true))

	f.AddService("paris", "default", "nginx-svc", labels.Gateway, nil, httpPort)
	f.AddSlice("paris", "default", "nginx-svc", []object.Port{httpPort}, ep("nginx-set-0", "10.2.0.10", true))
	f.AddMirror("default", "nginx-svc-paris", "paris", "", nil, httpPort)
	f.AddMirror("default", "nginx-set-0-paris", "paris", "nginx-svc-paris", []string{"10.96.1.10"}, httpPort)

	f.AddFlat("tokyo", "default", "nginx-svc", ep("nginx-set-0", "10.3.0.10", true))

	f.AddService("east", "default", "nginx-svc", labels.Gateway, nil, httpPort)
	f.AddSlice("east", "default", "nginx-svc", []object.Port{httpPort}, ep("nginx-set-0", "10.0.0.10", true))
	return f
}

// newHealthPlugin returns a plugin over src, every group built, that reads
// the peer states at url every interval once started.
func newHealthPlugin(t *testing.T, src *indextest.Source, url string, interval time.Duration) *MCMirror {
	return newPlugin(t, src, Options{
		Zones:                 []string{"cluster.local.", "in-addr.arpa."},
		TTL:                   5,
		Fall:                  fall.Zero,
		GatewayHealthURL:      url,
		GatewayHealthInterval: interval,
	})
}

// query answers name through ServeDNS.
func query(t *testing.T, m *MCMirror, name string, qtype uint16) *dns.Msg {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: true})
	_, err := m.ServeDNS(context.Background(), rec, test.Case{Qname: name, Qtype: qtype}.Msg())
	require.NoError(t, err)
	require.NotNil(t, rec.Msg)
	return rec.Msg
}

// answerA returns the A addresses ServeDNS answers for name, sorted.
func answerA(t *testing.T, m *MCMirror, name string) []string {
	_, out := askA(t, m, name)
	return out
}

// answerSRV returns the SRV targets ServeDNS answers for name, and the
// owners of the glue, sorted.
func answerSRV(t *testing.T, m *MCMirror, name string) (targets, glue []string) {
	msg := query(t, m, name, dns.TypeSRV)
	for _, rr := range msg.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			targets = append(targets, s.Target)
		}
	}
	for _, rr := range msg.Extra {
		glue = append(glue, rr.Header().Name)
	}
	slices.Sort(targets)
	slices.Sort(glue)
	return targets, glue
}

// aliveGauge returns coredns_mcmirror_gateway_health_alive{cluster}, and
// whether the series exists (reading it must not make it).
func aliveGauge(cluster string) (float64, bool) {
	ch := make(chan prometheus.Metric, 64)
	go func() { gatewayAlive.Collect(ch); close(ch) }()
	v, found := 0.0, false
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "cluster" && l.GetValue() == cluster {
				v, found = d.GetGauge().GetValue(), true
			}
		}
	}
	return v, found
}

// answersEventually fails t unless name comes to be answered the A
// addresses want within 5 s.
func answersEventually(t *testing.T, m *MCMirror, name string, want []string, msgAndArgs ...any) {
	t.Helper()
	eventually(t, func() bool { return slices.Equal(answerA(t, m, name), want) }, msgAndArgs...)
}

func eventually(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond, msgAndArgs...)
}

func gaugeIs(cluster string, want float64) bool {
	v, ok := aliveGauge(cluster)
	return ok && v == want
}

var (
	globalAll = []string{"10.0.0.10", "10.3.0.10", "10.96.0.10", "10.96.0.11", "10.96.1.10"}
	// globalNoWest is without west's gateway-mode members: east (local),
	// paris (gateway, alive) and tokyo (flat, whatever its health says).
	globalNoWest = []string{"10.0.0.10", "10.3.0.10", "10.96.1.10"}
	srvNoWest    = []string{"nginx-set-0.nginx-svc" + z, "nginx-set-0.nginx-svc-paris" + z, "nginx-set-0.nginx-svc-tokyo" + z}
)

// TestGatewayHealthGlobal runs the poller against an HTTP server serving
// the gateway's peer states: west's gateway goes down and comes back.
func TestGatewayHealthGlobal(t *testing.T) {
	// tokyo's flat-mode members and east's own stay in whatever the JSON
	// says of them.
	peers := newPeersServer(t, map[string]bool{"east": false, "paris": true, "tokyo": false, "west": true})
	const interval = 50 * time.Millisecond
	m := newHealthPlugin(t, healthFixture(), peers.URL+"/peers", interval)
	m.health.start()
	t.Cleanup(func() { m.health.stop() })
	global, srvGlobal := "nginx-svc-global"+z, "_http._tcp.nginx-svc-global"+z

	// Alive: every member, and the gauge says so.
	eventually(t, func() bool { return gaugeIs("west", 1) && gaugeIs("paris", 1) })
	require.Equal(t, globalAll, answerA(t, m, global))
	targets, _ := answerSRV(t, m, srvGlobal)
	require.Contains(t, targets, "nginx-set-1.nginx-svc-west"+z)
	_, found := aliveGauge("east")
	assert.False(t, found, "the local cluster has no gauge")

	// West's gateway goes down: its gateway-mode members leave -global.
	down := time.Now()
	peers.set("west", false)
	answersEventually(t, m, global, globalNoWest)
	t.Logf("west out of -global %s after the flip (interval %s)", time.Since(down).Round(time.Millisecond), interval)
	runCase(t, m, srvCase(srvGlobal, 33, 80,
		"nginx-set-0.nginx-svc-paris"+z, "10.96.1.10",
		"nginx-set-0.nginx-svc-tokyo"+z, "10.3.0.10",
		"nginx-set-0.nginx-svc"+z, "10.0.0.10"), true)
	assert.Equal(t, []string{"10.96.0.10", "10.96.0.11"}, answerA(t, m, "nginx-svc-west"+z), "per-cluster names keep answering")
	assert.Equal(t, []string{"10.96.0.10"}, answerA(t, m, "nginx-set-0.nginx-svc-west"+z))
	// web's group is requeued on its own, maybe after nginx-svc's.
	answersEventually(t, m, "web-global"+z, nil, "west was web's only member")
	assert.Equal(t, []string{"10.96.0.20"}, answerA(t, m, "web-west"+z))
	assert.Equal(t, []string{"10.1.0.30"}, answerA(t, m, "flat-global"+z), "a flat-mode export needs no gateway")
	assert.True(t, gaugeIs("west", 0), "gateway_health_alive{west}")
	assert.True(t, gaugeIs("paris", 1), "gateway_health_alive{paris}")
	assert.True(t, gaugeIs("tokyo", 0), "gateway_health_alive{tokyo}: what the gateway says, though it hides nothing")

	// It comes back.
	peers.set("west", true)
	answersEventually(t, m, global, globalAll)
	eventually(t, func() bool {
		targets, glue := answerSRV(t, m, srvGlobal)
		return len(targets) == 5 && slices.Contains(targets, "nginx-set-1.nginx-svc-west"+z) && slices.Contains(glue, "nginx-set-1.nginx-svc-west"+z)
	})
	// Each group west is in is requeued on its own: web's may come back
	// after nginx-svc's.
	answersEventually(t, m, "web-global"+z, []string{"10.96.0.20"}, "web-global back with west")
	assert.True(t, gaugeIs("west", 1), "gateway_health_alive{west}")
}

// TestGatewayHealthFailOpen: the health server goes away while west is
// down; after the grace every gateway counts as alive.
func TestGatewayHealthFailOpen(t *testing.T) {
	peers := newPeersServer(t, map[string]bool{"paris": true, "west": false})
	m := newHealthPlugin(t, healthFixture(), peers.URL+"/peers", 20*time.Millisecond)
	logs := &logRecorder{}
	m.health.log = logs
	m.health.start()
	t.Cleanup(func() { m.health.stop() })
	global := "nginx-svc-global" + z

	answersEventually(t, m, global, globalNoWest)
	require.True(t, gaugeIs("west", 0))

	errs := testutil.ToFloat64(gatewayHealthErrors)
	peers.Close()
	eventually(t, func() bool { return testutil.ToFloat64(gatewayHealthErrors) >= errs+2 })
	answersEventually(t, m, global, globalAll)
	assert.True(t, gaugeIs("west", 1), "failed open: gateway_health_alive{west}")
	assert.Equal(t, 1, logs.count("keeping the last known gateway states"), logs.lines)
	assert.Equal(t, 1, logs.count("counting every gateway alive"), logs.lines)
}

// TestGatewayHealthGrace polls by hand, at chosen times: one poll applies a
// change; an unreadable or garbled URL keeps the last state for the grace,
// then fails open; each is logged once.
func TestGatewayHealthGrace(t *testing.T) {
	peers := newPeersServer(t, map[string]bool{"paris": true, "west": false})
	m := newHealthPlugin(t, healthFixture(), peers.URL, time.Second)
	h := m.health
	logs := &logRecorder{}
	h.log = logs
	h.grace = 10 * time.Second
	ctx := context.Background()
	global := "nginx-svc-global" + z
	t0 := time.Now()
	h.lastRead = t0

	require.Equal(t, globalAll, answerA(t, m, global), "alive until told otherwise")
	h.poll(ctx, t0)
	require.Equal(t, globalNoWest, answerA(t, m, global), "one poll takes west out")
	require.Equal(t, 1, logs.count("Gateway of cluster west is down"))

	errs := testutil.ToFloat64(gatewayHealthErrors)
	for i, body := range []string{"<html>gateway</html>", `{"west":true}`, `[{"alive":true}]`, `[{"cluster":"west"}]`} {
		peers.serveGarbage(body)
		h.poll(ctx, t0.Add(time.Duration(i+1)*time.Second))
		require.Equal(t, globalNoWest, answerA(t, m, global), "within the grace, after %q", body)
	}
	assert.Equal(t, errs+4, testutil.ToFloat64(gatewayHealthErrors), "every bad read counted")
	assert.Equal(t, 1, logs.count("keeping the last known gateway states"), "logged once: %v", logs.lines)
	assert.True(t, gaugeIs("west", 0))

	h.poll(ctx, t0.Add(10*time.Second))
	require.Equal(t, globalAll, answerA(t, m, global), "failed open after the grace")
	assert.True(t, gaugeIs("west", 1))
	h.poll(ctx, t0.Add(11*time.Second))
	assert.Equal(t, 1, logs.count("counting every gateway alive"), "logged once: %v", logs.lines)
	assert.Equal(t, 1, logs.count("Gateway of cluster west is alive"))

	// Readable again: west is down again. Then absent from the list:
	// alive, and its series goes.
	peers.serveGarbage("")
	h.poll(ctx, t0.Add(12*time.Second))
	require.Equal(t, globalNoWest, answerA(t, m, global))
	assert.Equal(t, 1, logs.count("readable again"))
	peers.mu.Lock()
	delete(peers.alive, "west")
	peers.mu.Unlock()
	h.poll(ctx, t0.Add(13*time.Second))
	require.Equal(t, globalAll, answerA(t, m, global), "a cluster absent from the list is alive")
	_, found := aliveGauge("west")
	assert.False(t, found, "no series for a cluster the gateway does not list")
	assert.True(t, gaugeIs("paris", 1))
	h.stop()
}

func TestGatewayHealthRead(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   map[string]bool
		err    string
	}{
		{200, `[]`, map[string]bool{}, ""},
		{200, `[{"cluster":"west","alive":false,"probed":true,"since":"2026-01-02T03:04:05Z","latencyNanos":0,"error":"refused"},{"cluster":"paris","alive":true}]`,
			map[string]bool{"west": false, "paris": true}, ""},
		{200, `<html></html>`, nil, "not a list of peer states"},
		{200, `{"cluster":"west","alive":true}`, nil, "not a list of peer states"},
		{200, `[{"cluster":"west","alive":"no"}]`, nil, "not a list of peer states"},
		{200, `[{"alive":true}]`, nil, "peer state 0 has no cluster"},
		{200, `[{"cluster":"west","alive":true},{"cluster":"paris"}]`, nil, "peer state 1 has no cluster or no alive"},
		{200, ``, nil, "not a list of peer states"},
		{503, `[]`, nil, "answered 503 Service Unavailable"},
	}
	for _, tc := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		h := newGatewayHealth(srv.URL, time.Second, "east", nil)
		got, err := h.read(context.Background())
		srv.Close()
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "body %q", tc.body)
			continue
		}
		if assert.NoError(t, err, "body %q", tc.body) {
			assert.Equal(t, tc.want, got)
		}
	}

	h := newGatewayHealth("http://127.0.0.1:1/peers", time.Second, "east", nil)
	_, err := h.read(context.Background())
	assert.ErrorContains(t, err, "connection refused")
}

// TestGatewayHealthRebuildsOnlyItsGroups: a change rebuilds the groups
// with gateway-mode members of the cluster that changed, no other.
func TestGatewayHealthRebuildsOnlyItsGroups(t *testing.T) {
	src := healthFixture()
	src.AddService("paris", "default", "api", labels.Gateway, []string{"10.100.1.1"}, httpPort)
	src.AddMirror("default", "api-paris", "paris", "", []string{"10.96.1.1"}, httpPort)
	peers := newPeersServer(t, map[string]bool{"west": false, "tokyo": false})
	m := newHealthPlugin(t, src, peers.URL, time.Second)
	nginx, web, api := object.ServiceKey("default", "nginx-svc"), object.ServiceKey("default", "web"), object.ServiceKey("default", "api")

	assert.Equal(t, []object.GroupKey{api, nginx}, m.index.GatewayGroups([]string{"paris"}))
	assert.Empty(t, m.index.GatewayGroups([]string{"tokyo"}), "flat mode only")

	var rebuilt []object.GroupKey
	m.requeue = func(k object.GroupKey) { rebuilt = append(rebuilt, k); m.syncNow(k) }
	m.health.poll(context.Background(), time.Now())
	assert.Equal(t, []object.GroupKey{nginx, web}, rebuilt)
	assert.Equal(t, globalNoWest, answerA(t, m, "nginx-svc-global"+z))

	// Nothing changed: nothing rebuilt.
	rebuilt = nil
	m.health.poll(context.Background(), time.Now())
	assert.Empty(t, rebuilt)

	// The group goes: it is forgotten.
	delete(src.Services, [3]string{"paris", "default", "api"})
	m.index.Sync(api)
	assert.Equal(t, []object.GroupKey{nginx}, m.index.GatewayGroups([]string{"paris"}))

	// Without gateway_health nothing is recorded.
	plain := newTestPlugin(t, healthFixture(), 5, fall.Zero)
	assert.Empty(t, plain.index.GatewayGroups([]string{"paris", "west"}))
	assert.Nil(t, plain.health)
}

// TestGatewayHealthController runs the real informer layer: the rebuild
// goes through the controller's queue.
func TestGatewayHealthController(t *testing.T) {
	flat := map[string]string{labels.Exported: labels.ExportFlat}
	west := remotetest.NewClientset(
		watchtest.Service("web", watchtest.ExportedGateway, "10.100.0.1", corev1.ServicePort{Name: "http", Port: 80}),
		watchtest.Service("db", flat, "10.100.0.2", corev1.ServicePort{Name: "http", Port: 80}),
		watchtest.EndpointSlice("db-1", "db", watchtest.PodEndpoint("", "10.1.0.2", true)),
	)
	paris := remotetest.NewClientset(watchtest.Service("web", watchtest.ExportedGateway, "10.101.0.1", corev1.ServicePort{Name: "http", Port: 80}))
	local := remotetest.NewClientset(
		watchtest.MirrorService("web-west", "west", "", "10.96.0.20"),
		watchtest.MirrorService("web-paris", "paris", "", "10.96.1.20"),
	)
	peers := newPeersServer(t, map[string]bool{"paris": true, "west": true})
	m := startPlugin(t, local, Options{StartupTimeout: time.Second,
		GatewayHealthURL: peers.URL + "/peers", GatewayHealthInterval: 50 * time.Millisecond}, "west", west, "paris", paris)

	eventually(t, func() bool {
		return slices.Equal(answerA(t, m, "web-global"+z), []string{"10.96.0.20", "10.96.1.20"}) && peers.readCount() > 0
	})
	peers.set("west", false)
	answersEventually(t, m, "web-global"+z, []string{"10.96.1.20"})
	assert.Equal(t, []string{"10.96.0.20"}, answerA(t, m, "web-west"+z))
	assert.Equal(t, []string{"10.1.0.2"}, answerA(t, m, "db-global"+z))
	peers.set("west", true)
	answersEventually(t, m, "web-global"+z, []string{"10.96.0.20", "10.96.1.20"})
}

// hookSource runs hook once, at the start of the next build.
type hookSource struct {
	*indextest.Source
	hook func()
}

func (h *hookSource) Links() []string {
	if f := h.hook; f != nil {
		h.hook = nil
		f()
	}
	return h.Source.Links()
}

// TestGatewayHealthChangeDuringBuild: a change that lands while a group is
// first built, before the index knows the group has gateway-mode members,
// has that build asked for again.
func TestGatewayHealthChangeDuringBuild(t *testing.T) {
	peers := newPeersServer(t, map[string]bool{"west": true})
	src := &hookSource{Source: healthFixture()}
	m, err := newWithSource(src, Options{Zones: []string{"cluster.local."}, Cluster: "east", TTL: 5,
		GatewayHealthURL: peers.URL, GatewayHealthInterval: time.Second})
	require.NoError(t, err)
	m.Next = fromNext
	nginx := object.ServiceKey("default", "nginx-svc")

	src.hook = func() {
		peers.set("west", false)
		m.health.poll(context.Background(), time.Now())
	}
	again := m.index.Sync(nginx)
	require.Equal(t, globalAll, answerA(t, m, "nginx-svc-global"+z), "built with the state it started with")
	require.Equal(t, []object.GroupKey{nginx}, again)
	for _, k := range again {
		m.syncNow(k)
	}
	require.Equal(t, globalNoWest, answerA(t, m, "nginx-svc-global"+z))
	m.health.stop()
}

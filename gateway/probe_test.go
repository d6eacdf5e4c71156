package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probed is the ingress of cluster north, which can be stopped and
// started again on the same address.
type probed struct {
	t      *testing.T
	certs  *Certs
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *probed) start() {
	n.t.Helper()
	ln, err := net.Listen("tcp", n.addr)
	require.NoError(n.t, err)
	n.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	in := &Ingress{Certs: n.certs, Resolver: &fakeResolver{}}
	go func() {
		defer close(n.done)
		_ = in.Serve(ctx, ln)
	}()
	n.t.Cleanup(n.stop)
}

func (n *probed) stop() {
	n.cancel()
	<-n.done
}

type change struct {
	cluster string
	alive   bool
	err     string
}

// The prober probes at once (no blind first period), keeps a peer alive
// while its ingress answers, marks it down after FailureThreshold failed
// probes and up again after one success, calling OnChange each time, and
// serves the states as JSON.
func TestProberFollowsPeer(t *testing.T) {
	p := newPair(t)
	north := &probed{t: t, certs: p.certs(t, "north", gatewaytest.Options{}), addr: "127.0.0.1:0"}
	north.start()
	// The address is read here once: start writes north.addr again when it
	// comes back, while the prober reads its peers.
	northAddr := north.addr

	var mu sync.Mutex
	var changes []change
	var gone atomic.Bool
	prober := &Prober{
		Certs: p.east,
		Peers: func() map[string]string {
			if gone.Load() {
				return nil
			}
			return map[string]string{"north": northAddr}
		},
		// A long interval first: the first probe must not wait for it.
		Interval: time.Hour, Timeout: time.Second, FailureThreshold: 2,
		OnChange: func(cluster string, alive bool, err string) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, change{cluster, alive, err})
		},
	}
	latencies := histogramCount(t, probeLatency.WithLabelValues("north"))
	successes := value(probesTotal.WithLabelValues("north", "success"))
	stop := runProber(prober)
	require.Eventually(t, func() bool { return prober.States()["north"].Probed }, 10*time.Second, 5*time.Millisecond,
		"no probe ended: the first one waited for the interval")
	st := prober.States()["north"]
	assert.True(t, st.Alive, "error: %s", st.Error)
	assert.Positive(t, st.Latency)
	assert.Equal(t, 1.0, value(peerAlive.WithLabelValues("north")))
	assert.Equal(t, latencies+1, histogramCount(t, probeLatency.WithLabelValues("north")))
	assert.Equal(t, successes+1, value(probesTotal.WithLabelValues("north", "success")))
	stop()

	// Now a prober that probes often, with the ingress going away and
	// coming back.
	prober = &Prober{Certs: p.east, Peers: prober.Peers, OnChange: prober.OnChange,
		Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 2}
	defer runProber(prober)()
	require.Eventually(t, func() bool { return value(probesTotal.WithLabelValues("north", "success")) >= successes+3 }, 10*time.Second, 5*time.Millisecond)
	failures := value(probesTotal.WithLabelValues("north", "failure"))
	north.stop()
	require.Eventually(t, func() bool { return value(peerAlive.WithLabelValues("north")) == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, value(probesTotal.WithLabelValues("north", "failure")), failures+2, "down before FailureThreshold failures")
	st = prober.States()["north"]
	assert.False(t, st.Alive)
	assert.NotEmpty(t, st.Error)
	assert.Equal(t, []bool{false}, peerJSON(t, prober))

	north.start() // same address
	require.Eventually(t, func() bool { return value(peerAlive.WithLabelValues("north")) == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.True(t, prober.States()["north"].Alive)
	assert.Equal(t, []bool{true}, peerJSON(t, prober))

	var seen []change
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append([]change(nil), changes...)
		return len(seen) >= 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Len(t, seen, 2, "OnChange: %v", seen)
	assert.Equal(t, "north", seen[0].cluster)
	assert.False(t, seen[0].alive)
	assert.NotEmpty(t, seen[0].err)
	assert.Equal(t, change{"north", true, ""}, seen[1])

	// A peer no longer listed is forgotten.
	gone.Store(true)
	require.Eventually(t, func() bool { _, ok := prober.States()["north"]; return !ok }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, "[]\n", peersBody(t, prober))
}

// runProber runs p until the function it returns is called.
func runProber(p *Prober) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// peersBody serves /peers and returns its body, JSON answered 200.
func peersBody(t *testing.T, p *Prober) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/peers", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Body.String()
}

// peerJSON reads /peers as the DNS plugin does and returns the alive
// flags, in cluster order.
func peerJSON(t *testing.T, p *Prober) []bool {
	t.Helper()
	var peers []struct {
		Cluster string `json:"cluster"`
		Alive   bool   `json:"alive"`
		Probed  bool   `json:"probed"`
	}
	require.NoError(t, json.Unmarshal([]byte(peersBody(t, p)), &peers))
	var alive []bool
	for _, p := range peers {
		assert.Equal(t, "north", p.Cluster)
		assert.True(t, p.Probed)
		alive = append(alive, p.Alive)
	}
	return alive
}

// A probe reaching a gateway of another cluster than the one it probes,
// or an ingress not synced yet, fails.
func TestProbeFailures(t *testing.T) {
	p := newPair(t)
	prober := &Prober{Certs: p.east}
	ctx := context.Background()
	require.NoError(t, prober.probe(ctx, "west", p.ingressAddr))
	assert.ErrorContains(t, prober.probe(ctx, "north", p.ingressAddr), `cluster "west", not "north"`)

	unsynced := serveIngress(t, &Ingress{Certs: p.west, Resolver: newExports(t, remotetest.NewClientset())})
	assert.ErrorContains(t, prober.probe(ctx, "west", unsynced), "503")
}

// A peer counts as alive from the start, in the metric too, before its
// first probe ends (here: an ingress that accepts and never answers).
func TestProberAliveBeforeFirstProbe(t *testing.T) {
	p := newPair(t)
	ln := listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	prober := &Prober{Certs: p.east, Peers: func() map[string]string { return map[string]string{"south": ln.Addr().String()} },
		Interval: time.Hour, Timeout: time.Hour}
	stop := runProber(prober)
	c := within(t, accepted, 10*time.Second, "no probe started") // the first probe is under way
	st := prober.States()["south"]
	assert.False(t, st.Probed)
	assert.True(t, st.Alive)
	assert.Equal(t, 1.0, value(peerAlive.WithLabelValues("south")))
	assert.Contains(t, peersBody(t, prober), `{"cluster":"south","alive":true,"probed":false,`)
	c.Close()
	stop()
}

package mcmirror

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/peers"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// The gateway health: with gateway_health, the plugin polls the gateway's
// GET /peers (gateway/probe.go, internal/peers), and the gateway-mode members of a cluster
// whose gateway is down leave the -global names; its own names keep
// answering (index/gateways.go). A health change rebuilds only the groups
// that have gateway-mode members of the clusters that changed, through the
// same queue as any other change, so a query costs what it costs without
// gateway_health.

const (
	// defaultHealthInterval is gateway_health's INTERVAL: the gateway
	// probes every 2 s too.
	defaultHealthInterval = 2 * time.Second
	// healthGraceIntervals is how many intervals the last known state is
	// kept while the health URL cannot be read, before failing open: long
	// enough to ride over the restart of the gateway that serves it, short
	// enough that a broken health source does not keep a cluster out of
	// -global for long.
	healthGraceIntervals = 5
	// maxHealthBody bounds what is read of an answer.
	maxHealthBody = 1 << 20
)

// logger is what gatewayHealth logs with: the plugin's log, a recorder in
// tests.
type logger interface {
	Infof(format string, v ...any)
	Warningf(format string, v ...any)
}

// gatewayHealth polls the gateway's peer states and keeps the set of
// clusters whose gateway is down.
type gatewayHealth struct {
	url      string
	interval time.Duration
	// grace is how long the last known state is kept while url cannot be
	// read; after it every gateway counts as alive (fail open).
	grace time.Duration
	// local is this cluster's name: its members never leave -global.
	local  string
	client *http.Client
	log    logger
	// changed is told the clusters whose gateways are down, and those
	// whose state changed: the plugin has the index take the new state
	// and requeues the groups it names.
	changed func(down map[string]bool, clusters []string)

	// Owned by the poll loop.
	down     map[string]bool // the clusters whose gateway is down
	lastRead time.Time       // last good read, or the start
	failing  bool            // the last read failed; logged once
	open     bool            // failed open; logged once
	reported map[string]bool // the clusters of the last good read, for the metric

	cancel context.CancelFunc
	done   chan struct{}
}

func newGatewayHealth(url string, interval time.Duration, local string, changed func(map[string]bool, []string)) *gatewayHealth {
	if interval <= 0 {
		interval = defaultHealthInterval
	}
	return &gatewayHealth{
		url:      url,
		interval: interval,
		grace:    healthGraceIntervals * interval,
		local:    local,
		client:   &http.Client{},
		log:      log,
		changed:  changed,
		reported: map[string]bool{},
	}
}

// healthClient is the HTTP client of gateway_health: with resolver
// (host:port of a DNS server) it looks host names up there, over UDP and
// TCP as a stub resolver does; without, with the system's resolver.
func healthClient(resolver string) *http.Client {
	if resolver == "" {
		return &http.Client{}
	}
	d := &net.Dialer{Resolver: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, network, resolver)
		},
	}}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = d.DialContext
	return &http.Client{Transport: t}
}

// start polls, at once and then every interval, until stop. Without
// gateway_health (h nil) it does nothing.
func (h *gatewayHealth) start() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	h.lastRead = time.Now()
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.interval)
		defer t.Stop()
		for {
			h.poll(ctx, time.Now())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop stops polling, and drops the metric series of the clusters it
// reported.
func (h *gatewayHealth) stop() {
	if h == nil {
		return
	}
	if h.cancel != nil {
		h.cancel()
		<-h.done
	}
	for c := range h.reported {
		gatewayAlive.DeleteLabelValues(c)
	}
}

// poll reads the peer states once, at now, and applies them; when they
// cannot be read it keeps the last known state for the grace period, then
// counts every gateway alive.
func (h *gatewayHealth) poll(ctx context.Context, now time.Time) {
	alive, err := h.read(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		gatewayHealthErrors.Inc()
		if !h.failing {
			h.failing = true
			h.log.Warningf("gateway_health %s: %v; keeping the last known gateway states for %s", h.url, err, h.grace)
		}
		if !h.open && now.Sub(h.lastRead) >= h.grace {
			h.open = true
			h.log.Warningf("gateway_health %s: unreadable for %s; counting every gateway alive", h.url, h.grace)
			h.apply(nil)
		}
		return
	}
	h.lastRead = now
	if h.failing {
		h.failing, h.open = false, false
		h.log.Infof("gateway_health %s: readable again", h.url)
	}
	h.apply(alive)
}

// read fetches the peer states: cluster to alive. Anything but a JSON
// array of objects that each name a cluster and say whether it is alive is
// an error (peers.Decode).
func (h *gatewayHealth) read(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHealthBody)) // so the connection is reused
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	states, err := peers.Decode(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		return nil, err
	}
	alive := make(map[string]bool, len(states))
	for c, st := range states {
		alive[c] = st.Alive
	}
	return alive, nil
}

// apply makes alive the state: the clusters it says are not alive are
// down, every other one (absent, or all of them when alive is nil) alive.
// The local cluster is never down.
func (h *gatewayHealth) apply(alive map[string]bool) {
	delete(alive, h.local)
	if alive != nil {
		for c := range h.reported {
			if _, ok := alive[c]; !ok {
				gatewayAlive.DeleteLabelValues(c)
				delete(h.reported, c)
			}
		}
		for c := range alive {
			h.reported[c] = true
		}
	}
	down := map[string]bool{}
	for c := range h.reported {
		// Set at every poll, not only on a change: a reload's old
		// instance drops the series when it stops.
		if a, ok := alive[c]; ok && !a {
			down[c] = true
			gatewayAlive.WithLabelValues(c).Set(0)
		} else {
			gatewayAlive.WithLabelValues(c).Set(1)
		}
	}

	was := h.down
	var changed []string
	for c := range down {
		if !was[c] {
			changed = append(changed, c)
			h.log.Warningf("Gateway of cluster %s is down: its gateway-mode members leave -global answers", c)
		}
	}
	for c := range was {
		if !down[c] {
			changed = append(changed, c)
			h.log.Infof("Gateway of cluster %s is alive: its gateway-mode members are back in -global answers", c)
		}
	}
	if len(changed) == 0 {
		return
	}
	h.down = down
	slices.Sort(changed)
	h.changed(down, changed)
}

// gatewaysChanged has the index take down, the clusters whose gateways
// are down, and rebuilds the groups that have gateway-mode members of
// clusters, whose gateways went down or came back; no other group.
func (m *MCMirror) gatewaysChanged(down map[string]bool, clusters []string) {
	for _, k := range m.index.SetGatewaysDown(down, clusters) {
		m.requeue(k)
	}
}

// syncNow rebuilds group k, and the groups that build asks for, at once:
// the requeue of an MCMirror over a fake source, which has no queue.
func (m *MCMirror) syncNow(k object.GroupKey) {
	for queue := []object.GroupKey{k}; len(queue) > 0; {
		k, queue = queue[0], queue[1:]
		queue = append(queue, m.index.Sync(k)...)
	}
}

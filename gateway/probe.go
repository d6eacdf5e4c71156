package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/peers"

	"k8s.io/klog/v2"
)

// Prober probes the ingress of every peer over the mTLS port the tunnels
// use, from the moment it starts (no blind first period), and keeps their
// state: the gateway_alive metric, a log line and a callback (an Event) when
// a peer goes down or comes back, and the peers.State of each for /peers.
type Prober struct {
	Certs *Certs
	// Peers lists the peers to probe: cluster to ingress address. It is
	// read at every round, so peers may come and go.
	Peers func() map[string]string
	// Interval between probes of one peer (default 2 s), Timeout of one
	// probe (default 2 s), FailureThreshold failures in a row that make a
	// peer down (default 2). With the defaults a dead gateway is down
	// within 6 s.
	Interval, Timeout time.Duration
	FailureThreshold  int
	// OnChange is called when a peer goes down or comes back.
	OnChange func(cluster string, alive bool, err string)
	// DialContext replaces a net.Dialer in tests.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	mu       sync.Mutex
	state    map[string]*peers.State
	failures map[string]int
}

// Run probes until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("probe")
	p.mu.Lock()
	p.state = map[string]*peers.State{}
	p.failures = map[string]int{}
	p.mu.Unlock()
	interval := orDefault(p.Interval, 2*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		listed := p.Peers()
		p.forget(listed)
		var wg sync.WaitGroup
		for cluster, addr := range listed {
			wg.Go(func() {
				start := time.Now()
				err := p.probe(ctx, cluster, addr)
				p.record(logger, cluster, time.Since(start), err)
			})
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forget drops the peers no longer listed.
func (p *Prober) forget(listed map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.state {
		if _, ok := listed[c]; !ok {
			delete(p.state, c)
			delete(p.failures, c)
			peerAlive.DeleteLabelValues(c)
		}
	}
	for c := range listed {
		if _, ok := p.state[c]; !ok {
			p.state[c] = &peers.State{Alive: true, Since: time.Now()}
			peerAlive.WithLabelValues(c).Set(1) // nothing says it is down yet
		}
	}
}

// probe sends GET ProbePath to the ingress at addr and wants 200.
func (p *Prober) probe(ctx context.Context, cluster, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, orDefault(p.Timeout, 2*time.Second))
	defer cancel()
	raw, err := dialTCP(ctx, p.DialContext, addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	deadline, _ := ctx.Deadline()
	_ = raw.SetDeadline(deadline)
	conn := tls.Client(raw, p.Certs.PeerConfig(cluster))
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	if _, err := io.WriteString(conn, "GET "+ProbePath+" HTTP/1.1\r\nHost: "+cluster+"\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe answered %s", resp.Status)
	}
	return nil
}

func (p *Prober) record(logger klog.Logger, cluster string, rtt time.Duration, err error) {
	p.mu.Lock()
	st, ok := p.state[cluster]
	if !ok {
		p.mu.Unlock()
		return
	}
	was, wasProbed := st.Alive, st.Probed
	st.Probed = true
	if err == nil {
		p.failures[cluster] = 0
		st.Alive, st.Latency, st.Error = true, rtt, ""
		probesTotal.WithLabelValues(cluster, "success").Inc()
		probeLatency.WithLabelValues(cluster).Observe(rtt.Seconds())
	} else {
		p.failures[cluster]++
		st.Error = err.Error()
		probesTotal.WithLabelValues(cluster, "failure").Inc()
		if p.failures[cluster] >= orDefault(p.FailureThreshold, 2) {
			st.Alive = false
		}
	}
	changed := st.Alive != was
	if changed {
		st.Since = time.Now()
	}
	alive, msg := st.Alive, st.Error
	p.mu.Unlock()

	if alive {
		peerAlive.WithLabelValues(cluster).Set(1)
	} else {
		peerAlive.WithLabelValues(cluster).Set(0)
	}
	switch {
	case changed && !alive:
		logger.Info("Gateway of linked cluster is down", "cluster", cluster, "err", msg)
	case changed && alive:
		logger.Info("Gateway of linked cluster is back", "cluster", cluster, "latency", rtt)
	case !wasProbed && alive:
		logger.Info("Gateway of linked cluster answers", "cluster", cluster, "latency", rtt)
	}
	if changed && p.OnChange != nil {
		p.OnChange(cluster, alive, msg)
	}
}

// States returns a copy of every peer's state.
func (p *Prober) States() map[string]peers.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]peers.State, len(p.state))
	for c, st := range p.state {
		out[c] = *st
	}
	return out
}

// ServeHTTP serves the states as the /peers list (internal/peers): the DNS
// plugin's gateway_health source.
func (p *Prober) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = peers.Encode(w, p.States())
}

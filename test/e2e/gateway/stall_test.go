package gateway_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

// stallMemoryLimit and stallMaxConns are the gateway Deployment's
// limits.memory and --max-connections (deploy/gateway.yaml); the budget of
// grown copy buffers is a quarter of the limit, in the pod and here.
const (
	stallMemoryLimit = 1 << 30
	stallMaxConns    = 6000
	stallBudget      = stallMemoryLimit / 4
	// stallReaders come from stallSources addresses: two pods, each far
	// past the egress's default per-source bound (1,024).
	stallReaders = 10000
	stallSources = 2
	perSourceMax = 1024
	// stallDrain is what a reader reads before it stops: past the 128 KB
	// after which crypto/tls sends full 16 KB records, so that the
	// gateways read full buffers and grow them (1 KB, 16 KB, 256 KB).
	// stallFlood is what the target writes to each stream; the rest is
	// left in the kernel's buffers and the gateways'.
	stallDrain = 192 << 10
	stallFlood = stallDrain + 256<<10
)

// TestStalledReadersWithinMemoryLimit: 10,000 clients of a mirror, from
// two pods' addresses, each of which reads 192 KB and then stops reading,
// through real gateways each in a memory cgroup of the Deployment's 1 GiB
// limit and with its --max-connections. The egress admits 1,024 streams of
// each address and resets the rest; both gateways stay under their limit,
// their grown buffers within the budget; a stream established before the
// readers carries 2 MiB both ways meanwhile, whole, and a new client from
// a third address is served.
//
// MCMIRROR_STALL_SOURCES=10 spreads the readers over ten addresses, so that
// 6,000 streams fill --max-connections (no new client is then served). On
// loopback the kernel's socket buffers, autotuned to megabytes, take what a
// stalled reader leaves, so a gateway waits in Write with a grown buffer
// only once the host's TCP memory is under pressure: the ten-address run
// puts the machine's TCP memory near its tcp_mem bound, which is why it is
// not the default (bench/README.md has its figures).
func TestStalledReadersWithinMemoryLimit(t *testing.T) {
	sources := stallSources
	if v := os.Getenv("MCMIRROR_STALL_SOURCES"); v != "" {
		var err error
		sources, err = strconv.Atoi(v)
		require.NoError(t, err, "MCMIRROR_STALL_SOURCES")
		require.Positive(t, sources, "MCMIRROR_STALL_SOURCES")
	}
	ns := env.UniqueNamespace(t, "stall")
	west := env.Cluster("west")
	o := fleet()
	o.Gateway = harness.GatewayOptions{MemoryLimit: stallMemoryLimit, Args: []string{"--max-connections", strconv.Itoa(stallMaxConns)}}
	f := env.StartFleet(t, o)
	westGW, eastGW := f.Gateways["west"], f.Gateways["east"]

	flood := west.RunPod(t, "flood-0", harness.FloodServer(podPort, stallFlood))
	exportService(t, ns, "flood", false, []*harness.Pod{flood}, nil)
	exportService(t, ns, "echo", false, west.RunEchoPods(t, podPort, "echo-0"), nil)
	floodAddr, echoAddr := waitMirror(t, ns, "flood-west").addr(), waitMirror(t, ns, "echo-west").addr()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conn, err := net.DialTimeout("tcp", floodAddr, 2*time.Second)
		require.NoError(c, err)
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(conn, make([]byte, 1))
		require.NoError(c, err)
	}, wait, tick, "the flood pod's bytes come through the gateways")
	require.Equal(t, float64(stallBudget), metric(t, eastGW, "coredns_mcmirror_gateway_copy_buffer_budget_bytes", nil))

	// The legitimate stream, established before the readers come.
	legit := dialEcho(t, echoAddr)
	refused := func(reason string) float64 {
		return metric(t, eastGW, "coredns_mcmirror_gateway_refusals_total", map[string]string{"direction": "egress", "reason": reason})
	}
	fromSourceBefore, tooManyBefore := refused("too_many_from_source"), refused("too_many_connections")
	peaks := map[*harness.Gateway]*maxSampler{eastGW: sampleReserved(eastGW), westGW: sampleReserved(westGW)}

	// The readers. A reader whose first bytes came is a stalled stream and
	// stays open; one the egress reset is refused.
	conns := make([]net.Conn, stallReaders)
	perSource := make([]atomic.Int64, sources)
	var nRefused atomic.Int64
	start := time.Now()
	errs := parallel(len(conns), 64, func(i int) error {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%sources))}
		d := net.Dialer{Timeout: time.Minute, LocalAddr: src, Control: smallReceiveBuffer}
		c, err := d.Dial("tcp", floodAddr)
		if err != nil {
			// The egress accepts and resets at once, sometimes before
			// the client's connect has returned.
			if errors.Is(err, syscall.ECONNRESET) {
				nRefused.Add(1)
				return nil
			}
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if n, err := io.ReadFull(c, make([]byte, stallDrain)); err != nil {
			c.Close()
			if n == 0 && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) {
				nRefused.Add(1)
				return nil
			}
			return fmt.Errorf("after %d bytes: %w", n, err)
		}
		conns[i] = c
		perSource[i%sources].Add(1)
		return nil
	})
	closeReaders := func() {
		for i, c := range conns {
			if c != nil {
				c.Close()
				conns[i] = nil
			}
		}
	}
	t.Cleanup(closeReaders)
	require.Empty(t, errs, "readers that neither got their bytes nor were refused")
	var stalled int64
	for i := range perSource {
		stalled += perSource[i].Load()
		assert.LessOrEqual(t, perSource[i].Load(), int64(perSourceMax), "streams of 127.0.1.%d", i+1)
	}
	t.Logf("%d readers from %d addresses in %v: %d stalled streams, %d refused", len(conns), sources, time.Since(start).Round(time.Millisecond), stalled, nRefused.Load())
	require.Equal(t, int64(len(conns)), stalled+nRefused.Load())
	assert.LessOrEqual(t, stalled, int64(stallMaxConns-1), "more streams than --max-connections (the legitimate one holds a place)")
	// The refusals are the bounds' own, counted.
	assert.Equal(t, float64(nRefused.Load()), refused("too_many_from_source")-fromSourceBefore+refused("too_many_connections")-tooManyBefore,
		"refusals counted as too_many_from_source or too_many_connections")

	// The legitimate stream meanwhile, and a new client.
	echoWhole(t, legit, 2<<20)
	if sources*perSourceMax < stallMaxConns-1 {
		echoWhole(t, dialEcho(t, echoAddr), 2<<20)
	}

	// The promise: within the budget, under the limit, nothing killed.
	env.RequireAlive(t, eastGW.Process())
	env.RequireAlive(t, westGW.Process())
	for _, g := range []*harness.Gateway{eastGW, westGW} {
		reserved := peaks[g].end()
		m, err := g.Memory()
		require.NoError(t, err)
		t.Logf("%s gateway: memory peak %.1f MiB of %d MiB, OOM kills %d; grown buffers at most %.1f MiB of a budget of %d MiB, %.0f grows refused",
			g.Cluster.Name, float64(m.Peak)/(1<<20), stallMemoryLimit>>20, m.OOMKills, reserved/(1<<20), stallBudget>>20,
			metric(t, g, "coredns_mcmirror_gateway_copy_buffer_grows_refused_total", nil))
		assert.Zero(t, m.OOMKills, "%s: processes killed at the memory limit", g.Cluster.Name)
		assert.Less(t, m.Peak, int64(stallMemoryLimit), "%s: memory peak at the limit", g.Cluster.Name)
		assert.LessOrEqual(t, reserved, float64(stallBudget), "%s: grown buffers over the budget", g.Cluster.Name)
	}

	// Given back as the readers go.
	closeReaders()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, metric(c, eastGW, "coredns_mcmirror_gateway_copy_buffer_bytes_reserved", nil))
		assert.Zero(c, metric(c, eastGW, "coredns_mcmirror_gateway_connections_open", map[string]string{"direction": "egress"}))
	}, wait, tick, "east's streams and buffers given back")
}

// dialEcho connects to the echo pod through the egress and reads its
// greeting.
func dialEcho(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	want := "hello from west/echo-0\n"
	got := make([]byte, len(want))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err, "the echo pod's greeting")
	require.Equal(t, want, string(got))
	return c
}

// echoWhole sends n random bytes on c, half-closes it, and requires the
// same bytes back and then the end of the stream.
func echoWhole(t *testing.T, c net.Conn, n int) {
	t.Helper()
	payload := make([]byte, n)
	_, _ = rand.Read(payload)
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the legitimate stream")
	require.True(t, bytes.Equal(payload, got), "the legitimate stream echoed %d bytes of %d, or other bytes", len(got), len(payload))
}

// maxSampler keeps the largest value a read gave until it is ended.
type maxSampler struct {
	max        atomic.Uint64 // math.Float64bits
	stop, done chan struct{}
}

// sampleMax calls read every interval until end, and keeps the largest
// value it reads (ok false: nothing read, e.g. the process is gone).
func sampleMax(every time.Duration, read func() (v float64, ok bool)) *maxSampler {
	s := &maxSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if v, ok := read(); ok && v > math.Float64frombits(s.max.Load()) {
				s.max.Store(math.Float64bits(v))
			}
			select {
			case <-s.stop:
				return
			case <-time.After(every):
			}
		}
	}()
	return s
}

func (s *maxSampler) end() float64 {
	close(s.stop)
	<-s.done
	return math.Float64frombits(s.max.Load())
}

// sampleReserved samples a gateway's copy_buffer_bytes_reserved.
func sampleReserved(g *harness.Gateway) *maxSampler {
	return sampleMax(20*time.Millisecond, func() (float64, bool) {
		v, ok, err := g.Metric("coredns_mcmirror_gateway_copy_buffer_bytes_reserved", nil)
		return v, ok && err == nil
	})
}

// smallReceiveBuffer shrinks a reader's receive buffer before it connects,
// as a client that means to stall a proxy cheaply would.
func smallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); err != nil {
		return err
	}
	return serr
}

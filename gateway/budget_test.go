package gateway

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gathered reads a metric without labels as /metrics serves it: a series
// that is not there fails the test, rather than reading as 0.
func gathered(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		require.Len(t, mf.GetMetric(), 1, name)
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	require.Failf(t, "metric not served", "%s", name)
	return 0
}

// grownHeld is what the streams hold in buffers larger than the smallest,
// counted from the pools, apart from the budget.
func grownHeld() int64 {
	var n int64
	for i := 1; i < len(bufSizes); i++ {
		n += (bufTaken[i].Load() - bufReturned[i].Load()) * int64(bufSizes[i])
	}
	return n
}

// Readers that stop reading pin their streams' buffers, which cannot be
// given back while a Write waits: with a budget, only the budget's worth
// grows, every other stream copies with 1 KB buffers, and a legitimate
// stream still carries its bytes, whole, meanwhile.
//
// The numbers: a budget of 1 MiB (four 256 KB buffers) against 1,000
// stalled streams, each of which wants a 256 KB buffer in each gateway for
// the target's 384 KB it cannot deliver: 500 MiB wanted, 500 times the
// budget. Not 10,000: under the race detector a process may not have more
// than 8,128 goroutines, and a stream takes five here (four copies and the
// target's), and six descriptors of the 20,000 the test machine allows.
func TestStalledReadersStayWithinBufferBudget(t *testing.T) {
	const (
		budget  = 1 << 20
		stalled = 1000
		pending = 384 << 10
	)
	SetBufferBudget(budget)
	t.Cleanup(func() { SetBufferBudget(0) })
	p := newPair(t, func(in *Ingress, eg *Egress) {
		in.HandshakeTimeout, in.DialTimeout, eg.DialTimeout = time.Minute, time.Minute, time.Minute
		eg.MaxConnsPerSource = -1 // one client address opens them all
	})
	chunk := randomBytes(3, pending)
	flood := startServer(t, func(c net.Conn) {
		_, _ = c.Write(chunk)
		_, _ = io.Copy(io.Discard, c)
	})
	port := p.serveWeb(t, flood.addr)
	echo := startEcho(t, "")
	echoDest := Destination{Namespace: "default", Service: "echo", Port: 81}
	p.resolver.set(echoDest, echo.addr)
	echoPort := p.mirror(t, "echo", "", 81)
	noStreams(t)
	require.Zero(t, gathered(t, "coredns_mcmirror_gateway_copy_buffer_bytes_reserved"), "reserved before any stream")
	refusedBefore := gathered(t, "coredns_mcmirror_gateway_copy_buffer_grows_refused_total")

	// Sample what is held, all along.
	var maxReserved float64
	var maxHeld int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			maxReserved = max(maxReserved, value(bufReserved))
			maxHeld = max(maxHeld, grownHeld())
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	// The stalled readers: each reads the target's first byte (the
	// stream is established), then nothing.
	conns := make([]net.Conn, stalled)
	var wg sync.WaitGroup
	errs := make(chan error, stalled)
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				c, err := net.DialTimeout("tcp", egressAddr(port), time.Minute)
				if err != nil {
					errs <- err
					continue
				}
				conns[i] = c
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					errs <- err
				}
			}
		})
	}
	start := time.Now()
	for i := range stalled {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	require.EqualValues(t, stalled, value(connsOpen.WithLabelValues("west", DirectionEgress)))
	t.Logf("%d stalled streams open after %v", stalled, time.Since(start).Round(time.Millisecond))

	// A legitimate stream meanwhile: 2 MiB there and back.
	c := dialEgress(t, echoPort)
	payload := randomBytes(4, 2<<20)
	go func() {
		_, _ = c.Write(payload)
		_ = c.CloseWrite()
	}()
	got := readAll(t, c, 2*time.Minute)
	assert.True(t, bytes.Equal(payload, got), "echo: %d bytes of %d", len(got), len(payload))
	held := value(bufReserved)
	close(stop)
	<-sampled

	refused := gathered(t, "coredns_mcmirror_gateway_copy_buffer_grows_refused_total") - refusedBefore
	t.Logf("grown buffers: at most %.0f bytes reserved, %d held, %.0f held by the stalled streams at the end; %.0f grows refused; budget %d",
		maxReserved, maxHeld, held, refused, budget)
	assert.LessOrEqual(t, maxReserved, float64(budget), "copy_buffer_bytes_reserved over the budget")
	// The pools' counters of two sizes are read one after the other: one
	// buffer of slack.
	assert.LessOrEqual(t, maxHeld, int64(budget+bufSizes[len(bufSizes)-1]), "grown buffers held over the budget")
	// Positive evidence that the budget was what bound them: the stalled
	// streams filled it, to within one large buffer. Whether one still
	// holds a grown buffer at the end is the kernel's doing: over minutes
	// (a loaded machine took 3 to open the streams) it takes in more of a
	// stalled stream's bytes, the blocked Write returns and the buffer
	// goes back.
	assert.Greater(t, maxReserved, float64(budget-bufSizes[len(bufSizes)-1]), "the stalled streams never filled the budget")
	assert.Greater(t, refused, float64(stalled), "grows refused")
	assert.Equal(t, float64(budget), gathered(t, "coredns_mcmirror_gateway_copy_buffer_budget_bytes"))

	// Given back as the streams end.
	for _, c := range conns {
		c.Close()
	}
	noStreams(t)
	assert.Zero(t, gathered(t, "coredns_mcmirror_gateway_copy_buffer_bytes_reserved"), "reserved after every stream ended")
}

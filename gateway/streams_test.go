package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// held returns how many buffers of each size the streams hold now.
func held() (h [len(bufSizes)]int64) {
	for i := range h {
		h[i] = bufTaken[i].Load() - bufReturned[i].Load()
	}
	return h
}

// A stream's buffers grow with bulk traffic and, once it goes idle, are
// given back: an idle open connection holds no copy buffer (its directions
// wait for the next byte without one), whatever it carried before.
func TestIdleStreamHoldsSmallBuffers(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "hi")
	port := p.serveWeb(t, echo.addr)
	noStreams(t)
	base := held()
	largeBefore := bufTaken[len(bufSizes)-1].Load()

	c := dialEgress(t, port)
	readGreeting(t, c, "hi")
	// Bulk both ways (the echo), ending on a large write: no small read
	// at the end to hint that the traffic stopped.
	payload := randomBytes(5, 8<<20)
	go func() { _, _ = c.Write(payload) }()
	got := make([]byte, len(payload))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(payload, got))
	require.Greater(t, bufTaken[len(bufSizes)-1].Load(), largeBefore, "bulk traffic never grew a buffer to the largest size")

	// Idle now, and open: four directions (two in the egress, two in the
	// ingress), none with a buffer.
	want := base
	require.Eventually(t, func() bool { return held() == want }, 10*time.Second, 10*time.Millisecond,
		"buffers held by an idle stream: want %v, have %v (sizes %v)", want, held(), bufSizes)

	// And the stream still works.
	_, err = c.Write([]byte("again"))
	require.NoError(t, err)
	readGreeting(t, c, "again")
}

// A stream whose directions have given their buffers back and wait
// without them is still ended by the idle timeout, at both ends.
func TestIdleTimeoutEndsStreamWithoutBuffers(t *testing.T) {
	const idle = 2 * shrinkAfter
	p := newPair(t, func(in *Ingress, eg *Egress) { in.IdleTimeout = idle; eg.IdleTimeout = idle })
	ended := greetThenRead(t, p)
	port := p.mirror(t, "web", "", 80)
	noStreams(t)
	base := held()

	c := dialEgress(t, port)
	readGreeting(t, c, "hi")
	require.Eventually(t, func() bool { return held() == base }, idle, 10*time.Millisecond,
		"the idle stream's directions never gave their buffers back")
	requireEndedBothEnds(t, c, ended)
}

// fdCounts counts the process's open file descriptors, and among them
// the sockets and the pipe ends.
func fdCounts(t *testing.T) (all, sockets, pipes int) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, fd := range fds {
		l, _ := os.Readlink("/proc/self/fd/" + fd.Name())
		switch {
		case strings.HasPrefix(l, "socket:"):
			sockets++
		case strings.HasPrefix(l, "pipe:"):
			pipes++
		}
	}
	return len(fds), sockets, pipes
}

// noStreams waits until no stream of the pair's clusters is open, so that
// what the streams of earlier tests held is given back.
func noStreams(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		return value(connsOpen.WithLabelValues("west", DirectionEgress)) == 0 && value(connsOpen.WithLabelValues("east", DirectionIngress)) == 0
	}, 10*time.Second, 10*time.Millisecond, "streams of earlier tests still open")
}

// 1,000 streams open at once through egress → ingress all complete, and
// afterwards the goroutines and file descriptors are back where they were.
func TestThousandConcurrentStreams(t *testing.T) {
	const n = 1000
	p := newPair(t, func(in *Ingress, eg *Egress) {
		// A thousand handshakes at once, on a small machine under the
		// race detector, take long: the test is about all of them
		// completing, not about how fast.
		in.HandshakeTimeout = time.Minute
		eg.DialTimeout = time.Minute
		in.DialTimeout = time.Minute
	})
	echo := startEcho(t, "hi")
	port := p.serveWeb(t, echo.addr)
	addr := egressAddr(port)

	// One stream first, so that what starts once (session caches, the
	// egress's first dial) is in the baseline.
	warm := dialEgress(t, port)
	readGreeting(t, warm, "hi")
	require.NoError(t, warm.CloseWrite())
	_, _ = io.ReadAll(warm)
	warm.Close()
	noStreams(t)
	baseG := runtime.NumGoroutine()
	baseFD, _, _ := fdCounts(t)
	echoBefore := echo.count()

	var established sync.WaitGroup
	established.Add(n)
	release := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			up := sync.OnceFunc(established.Done)
			defer up()
			errs <- func() error {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
				b := make([]byte, 2)
				if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
					return fmt.Errorf("stream %d: greeting %q: %v", i, b, err)
				}
				up()
				<-release // every stream is open now
				msg := bytes.Repeat([]byte(strconv.Itoa(i)+";"), 200)
				if _, err := c.Write(msg); err != nil {
					return fmt.Errorf("stream %d: write: %w", i, err)
				}
				if err := c.(*net.TCPConn).CloseWrite(); err != nil {
					return err
				}
				got, err := io.ReadAll(c)
				if err != nil {
					return fmt.Errorf("stream %d: read: %w", i, err)
				}
				if !bytes.Equal(got, msg) {
					return fmt.Errorf("stream %d: echo differs", i)
				}
				return nil
			}()
		})
	}
	established.Wait()
	openAll := time.Since(start)
	peakG := runtime.NumGoroutine()
	peakFD, sockets, pipes := fdCounts(t)
	peakOpen := value(connsOpen.WithLabelValues("west", DirectionEgress))
	close(release)
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Error(err)
			}
		}
	}
	if failed > 0 { // what the gateway counted of the failures
		for _, c := range []prometheus.Collector{refusalsTotal, dialErrorsTotal, handshakeFailures} {
			out, _ := testutil.CollectAndFormat(c, expfmt.TypeTextPlain)
			t.Logf("%s", out)
		}
	}
	require.Zero(t, failed, "streams failed")
	assert.EqualValues(t, n, peakOpen, "egress streams open at once")
	assert.Equal(t, n, echo.count()-echoBefore)
	// Six sockets a stream (client, egress ×2, ingress ×2, target), and
	// the pipes through which the test's echo server splices.
	t.Logf("%d streams open after %v, all done after %v; at the peak %d goroutines, %d fds (%d sockets, %d pipe ends)",
		n, openAll.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), peakG, peakFD, sockets, pipes)

	const slack = 5
	var g, fds int
	ok := assert.Eventually(t, func() bool {
		g = runtime.NumGoroutine()
		fds, _, _ = fdCounts(t)
		return g <= baseG+slack && fds <= baseFD+slack
	}, 30*time.Second, 50*time.Millisecond)
	t.Logf("goroutines: baseline %d, peak %d, after %d; fds: baseline %d, peak %d, after %d", baseG, peakG, g, baseFD, peakFD, fds)
	if !ok {
		buf := make([]byte, 1<<20)
		t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	assert.Zero(t, value(connsOpen.WithLabelValues("west", DirectionEgress)))
	assert.Zero(t, value(connsOpen.WithLabelValues("east", DirectionIngress)))
}

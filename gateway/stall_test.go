package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A direction stuck in Write, its reader reading nothing, after the other
// direction half-closed: nothing reads on either side of the stream then,
// and only a bound on the write can end it. It ends after the idle
// timeout, at both gateways, and the target's write fails.
func TestIdleTimeoutEndsStalledWrite(t *testing.T) {
	const idle = 500 * time.Millisecond
	p := newPair(t, func(in *Ingress, eg *Egress) { in.IdleTimeout = idle; eg.IdleTimeout = idle })
	halfClosed, writeFailed := make(chan struct{}), make(chan error, 1)
	var written atomic.Int64
	flood := startServer(t, func(c net.Conn) {
		go func() {
			_, _ = io.Copy(io.Discard, c)
			close(halfClosed)
		}()
		chunk := make([]byte, 64<<10)
		for {
			n, err := c.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				writeFailed <- err
				return
			}
		}
	})
	port := p.serveWeb(t, flood.addr)
	noStreams(t)

	c := dialEgress(t, port)
	// Established: the target's first bytes arrived; then the client's
	// half-close reaches the target, and the client reads no more.
	readGreeting(t, c, string(make([]byte, 1)))
	require.NoError(t, c.CloseWrite())
	within(t, halfClosed, eventBound, "the client's half-close never reached the target")
	// Stuck: what the target wrote stops growing. (The stream may end
	// before this sees it on a loaded machine: what matters is that it
	// ends.)
	var stuckAt time.Time
	require.Eventually(t, func() bool {
		before := written.Load()
		time.Sleep(idle / 5)
		stuckAt = time.Now()
		return written.Load() == before
	}, eventBound, time.Millisecond, "the target's writes never stalled")

	err := within(t, writeFailed, 20*idle,
		"a stream stuck in Write outlived the idle timeout %v by %v", idle, 20*idle)
	t.Logf("stream ended %v after it stalled (idle timeout %v): the target's write failed: %v", time.Since(stuckAt).Round(time.Millisecond), idle, err)
	noStreams(t)
}

// A slow reader is not idle: with the other direction half-closed, a
// client that takes 1 KB every 50 ms, through small socket buffers,
// makes each of the egress's writes last longer than the idle timeout,
// and still reads the whole stream, ended by the target's orderly close.
func TestSlowReaderIsNotCut(t *testing.T) {
	const idle, total = 500 * time.Millisecond, 64 << 10
	small := func(opt int) func(_, _ string, rc syscall.RawConn) error {
		return func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4096) })
			return errors.Join(err, serr)
		}
	}
	p := newPair(t, func(in *Ingress, eg *Egress) {
		in.IdleTimeout, eg.IdleTimeout = idle, idle
		// The egress's send buffers small too (accepted sockets take the
		// listener's): its writes wait for the reader, not for nothing.
		lc := net.ListenConfig{Control: small(syscall.SO_SNDBUF)}
		eg.ListenFunc = func(network, addr string) (net.Listener, error) {
			return lc.Listen(context.Background(), network, addr)
		}
	})
	payload := randomBytes(9, total)
	srv := startServer(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite()
	})
	port := p.serveWeb(t, srv.addr)

	d := net.Dialer{Control: small(syscall.SO_RCVBUF)}
	raw, err := d.Dial("tcp", egressAddr(port))
	require.NoError(t, err)
	defer raw.Close()
	c := raw.(*net.TCPConn)
	require.NoError(t, c.CloseWrite())
	start := time.Now()
	var got bytes.Buffer
	b := make([]byte, 1<<10)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		n, err := io.ReadFull(c, b)
		got.Write(b[:n])
		if err != nil {
			require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "the stream ended otherwise than by the target's close: %v", err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	assert.True(t, bytes.Equal(payload, got.Bytes()), "read %d bytes of %d", got.Len(), total)
	assert.Greater(t, took, 4*idle, "the reader was not slow enough to prove anything")
	t.Logf("read %d bytes in %v, idle timeout %v", got.Len(), took.Round(time.Millisecond), idle)
}

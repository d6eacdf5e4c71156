//go:build unix

package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawPair returns a wrapped TCP connection and its (ordinary) peer, over
// loopback.
func rawPair(t *testing.T) (*rawConn, *net.TCPConn) {
	t.Helper()
	c, peer := tcpPair(t)
	rc, ok := carried(c).(*rawConn)
	require.True(t, ok && rc.raw.Load(), "carried(%T) did not wrap it with raw calls on", c)
	t.Cleanup(func() { rc.Close() })
	return rc, peer
}

// tcpPair returns both ends of a loopback TCP connection, the accepted one
// first; the dialled one is closed when t ends.
func tcpPair(t *testing.T) (net.Conn, *net.TCPConn) {
	t.Helper()
	ln := listen(t)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	c, err := ln.Accept()
	require.NoError(t, err)
	return c, peer.(*net.TCPConn)
}

func TestRawConnLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	require.Equal(t, a, newRawConn(a), "newRawConn(pipe): want the pipe itself")
}

func TestRawConnShortReadsAndDataBetweenReads(t *testing.T) {
	c, peer := rawPair(t)
	buf := make([]byte, 1024)
	for i, msg := range []string{"a", "hello", "the third message"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if i > 0 {
				// Arrives while the read below is waiting on the poller.
				time.Sleep(20 * time.Millisecond)
			}
			_, err := peer.Write([]byte(msg))
			assert.NoError(t, err)
		}()
		n, err := c.Read(buf)
		<-done
		require.NoError(t, err, "read %d", i)
		require.Equal(t, msg, string(buf[:n]), "read %d", i)
		require.False(t, c.bulk, "read %d: a short read marked the connection bulk", i)
	}
}

func TestRawConnDeadlineWhileParked(t *testing.T) {
	c, peer := rawPair(t)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	buf := make([]byte, 64)
	start := time.Now()
	n, err := c.Read(buf)
	require.Zero(t, n, "read past the deadline")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "read past the deadline")
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "%v is not a net.Error with Timeout(), as crypto/tls expects", err)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "returned before the deadline")
	// The connection still works once the deadline is moved.
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	_, err = peer.Write([]byte("late"))
	require.NoError(t, err)
	n, err = c.Read(buf)
	require.NoError(t, err, "after the deadline")
	require.Equal(t, "late", string(buf[:n]), "after the deadline")
}

func TestRawConnEOFAndHalfClose(t *testing.T) {
	c, peer := rawPair(t)
	_, err := peer.Write([]byte("last words"))
	require.NoError(t, err)
	require.NoError(t, peer.CloseWrite())
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "last words", string(got))
	n, err := c.Read(make([]byte, 8))
	require.Zero(t, n, "read after EOF")
	require.Equal(t, io.EOF, err, "read after EOF")
	// The write side still works after the peer's half-close, and the
	// copy path's half-close reaches the peer as EOF.
	_, err = c.Write([]byte("answer"))
	require.NoError(t, err)
	hc, ok := net.Conn(c).(halfCloser)
	require.True(t, ok, "rawConn has no CloseWrite")
	require.NoError(t, hc.CloseWrite())
	_, ok = net.Conn(c).(readCloser)
	require.True(t, ok, "rawConn has no CloseRead")
	got, err = io.ReadAll(peer)
	require.NoError(t, err)
	require.Equal(t, "answer", string(got), "peer ReadAll")
}

func TestRawConnAbortResets(t *testing.T) {
	c, peer := rawPair(t)
	abort(c)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := peer.Read(make([]byte, 8))
	require.ErrorIs(t, err, syscall.ECONNRESET, "peer read after abort (linger 0)")
	_, err = c.Read(make([]byte, 8))
	require.ErrorIs(t, err, net.ErrClosed, "read of an aborted connection")
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed, "write to an aborted connection")
}

func TestRawConnWriteToResetPeer(t *testing.T) {
	c, peer := rawPair(t)
	_ = peer.SetLinger(0)
	peer.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("into the void"))
		time.Sleep(time.Millisecond)
	}
	require.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE),
		"write to a reset peer: %v; want ECONNRESET or EPIPE", err)
}

// TestRawConnFullDuplexAndBackpressure writes 8 MiB in raw-sized and
// larger pieces while the peer reads slowly (so writes find the send
// buffer full and wait), and reads the peer's 8 MiB at the same time with
// a small and then a large buffer (short reads, full reads, the switch to
// bulk and back): every byte arrives, in order, both ways.
func TestRawConnFullDuplexAndBackpressure(t *testing.T) {
	c, peer := rawPair(t)
	const size = 8 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	want := sha256.Sum256(data)

	var wg sync.WaitGroup
	wg.Go(func() { // c writes, in pieces of several sizes
		for off, i := 0, 0; off < size; i++ {
			n := []int{100, rawMax, rawMax + 1, 3000, 64 << 10}[i%5]
			n = min(n, size-off)
			if w, err := c.Write(data[off : off+n]); err != nil || w != n {
				t.Errorf("write %d bytes at %d: %d, %v", n, off, w, err)
				return
			}
			off += n
		}
		assert.NoError(t, c.CloseWrite())
	})
	// Small socket buffers, so that c's writes find them full while the
	// peer does not read.
	require.NoError(t, c.SetWriteBuffer(64<<10))
	require.NoError(t, peer.SetReadBuffer(64<<10))
	wg.Go(func() { // the peer reads late, then slowly at first
		time.Sleep(100 * time.Millisecond)
		h := sha256.New()
		buf := make([]byte, 4096)
		total := 0
		for {
			n, err := peer.Read(buf)
			h.Write(buf[:n])
			total += n
			if total < 1<<20 {
				time.Sleep(50 * time.Microsecond)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
		match := bytes.Equal(h.Sum(nil), want[:])
		assert.True(t, total == size && match, "peer got %d bytes, checksum match %v", total, match)
	})
	wg.Go(func() { // the peer writes the same back, in one go
		_, err := peer.Write(data)
		assert.NoError(t, err)
		_ = peer.CloseWrite()
	})

	h := sha256.New()
	total, bulkSeen, small := 0, false, make([]byte, bulkRead)
	large := make([]byte, 256<<10)
	for i := 0; ; i++ {
		buf := small
		if i%2 == 1 {
			buf = large
		}
		n, err := c.Read(buf)
		h.Write(buf[:n])
		total += n
		bulkSeen = bulkSeen || c.bulk
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	wg.Wait()
	require.Equal(t, size, total)
	require.Equal(t, want[:], h.Sum(nil), "checksum")
	require.True(t, bulkSeen, "8 MiB read in 1 KiB and 256 KiB pieces never took the bulk path")
}

func TestRawConnZeroLength(t *testing.T) {
	c, _ := rawPair(t)
	n, err := c.Read(nil)
	require.NoError(t, err)
	require.Zero(t, n, "Read(nil)")
	n, err = c.Write(nil)
	require.NoError(t, err)
	require.Zero(t, n, "Write(nil)")
}

// TestRawConnUnderTLS runs the way Ingress and Egress use the wrapper: the
// handshake over ordinary calls, then carried turns the raw calls on
// under the TLS connection; messages go both ways, and abort still resets
// the peer through both wrappers.
func TestRawConnUnderTLS(t *testing.T) {
	p := newPair(t)
	accepted, peerRaw := tcpPair(t)
	wrapped := newRawConn(accepted)
	r := wrapped.(*rawConn)
	server := tls.Server(wrapped, p.west.ServerConfig())
	peer := tls.Client(peerRaw, p.east.PeerConfig("west"))
	hs := make(chan error, 1)
	go func() { hs <- peer.Handshake() }()
	require.NoError(t, server.Handshake())
	require.NoError(t, <-hs)
	require.False(t, r.raw.Load(), "raw calls on before the stream was carried")
	require.Equal(t, net.Conn(server), carried(server), "carried(tls.Conn): want the same connection")
	require.True(t, r.raw.Load(), "carried(tls.Conn) did not turn the raw calls on")
	buf := make([]byte, 1024)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte(i)}, 64)
		_, err := peer.Write(msg)
		require.NoError(t, err)
		n, err := server.Read(buf)
		require.NoError(t, err, "message %d", i)
		require.Equal(t, msg, buf[:n], "message %d", i)
		_, err = server.Write(buf[:n])
		require.NoError(t, err)
		_, err = io.ReadFull(peer, buf[:n])
		require.NoError(t, err, "answer %d", i)
		require.Equal(t, msg, buf[:n], "answer %d", i)
	}
	abort(server)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := peer.Read(buf)
	require.ErrorIs(t, err, syscall.ECONNRESET, "peer read after abort")
}

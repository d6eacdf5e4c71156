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
)

// rawPair returns a wrapped TCP connection and its (ordinary) peer, over
// loopback.
func rawPair(t *testing.T) (*rawConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := carried(c).(*rawConn)
	if !ok || !rc.raw.Load() {
		t.Fatalf("carried(%T) did not wrap it with raw calls on", c)
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer.(*net.TCPConn)
}

func TestRawConnLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := newRawConn(a); got != a {
		t.Fatalf("newRawConn(pipe) = %T, want the pipe itself", got)
	}
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
			if _, err := peer.Write([]byte(msg)); err != nil {
				t.Error(err)
			}
		}()
		n, err := c.Read(buf)
		<-done
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("read %d: %q, %v; want %q", i, buf[:n], err, msg)
		}
		if c.bulk {
			t.Fatalf("read %d: a short read marked the connection bulk", i)
		}
	}
}

func TestRawConnDeadlineWhileParked(t *testing.T) {
	c, peer := rawPair(t)
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	start := time.Now()
	n, err := c.Read(buf)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error with Timeout(), as crypto/tls expects", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("returned after %v, before the deadline", waited)
	}
	// The connection still works once the deadline is moved.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("after the deadline: %q, %v", buf[:n], err)
	}
}

func TestRawConnEOFAndHalfClose(t *testing.T) {
	c, peer := rawPair(t)
	if _, err := peer.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := peer.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("ReadAll: %q, %v", got, err)
	}
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF: %d, %v; want io.EOF", n, err)
	}
	// The write side still works after the peer's half-close, and the
	// copy path's half-close reaches the peer as EOF.
	if _, err := c.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	hc, ok := net.Conn(c).(halfCloser)
	if !ok {
		t.Fatal("rawConn has no CloseWrite")
	}
	if err := hc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, ok := net.Conn(c).(readCloser); !ok {
		t.Fatal("rawConn has no CloseRead")
	}
	got, err = io.ReadAll(peer)
	if err != nil || string(got) != "answer" {
		t.Fatalf("peer ReadAll: %q, %v", got, err)
	}
}

func TestRawConnAbortResets(t *testing.T) {
	c, peer := rawPair(t)
	abort(c)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := peer.Read(make([]byte, 8))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer read after abort: %v; want ECONNRESET (linger 0)", err)
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of an aborted connection: %v; want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to an aborted connection: %v; want net.ErrClosed", err)
	}
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
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a reset peer: %v; want ECONNRESET or EPIPE", err)
	}
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
	wg.Add(3)
	go func() { // c writes, in pieces of several sizes
		defer wg.Done()
		for off, i := 0, 0; off < size; i++ {
			n := []int{100, rawMax, rawMax + 1, 3000, 64 << 10}[i%5]
			n = min(n, size-off)
			if w, err := c.Write(data[off : off+n]); err != nil || w != n {
				t.Errorf("write %d bytes at %d: %d, %v", n, off, w, err)
				return
			}
			off += n
		}
		if err := c.CloseWrite(); err != nil {
			t.Error(err)
		}
	}()
	// Small socket buffers, so that c's writes find them full while the
	// peer does not read.
	if err := c.SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := peer.SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	go func() { // the peer reads late, then slowly at first
		defer wg.Done()
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
		if got := h.Sum(nil); total != size || !bytes.Equal(got, want[:]) {
			t.Errorf("peer got %d bytes, checksum match %v", total, bytes.Equal(got, want[:]))
		}
	}()
	go func() { // the peer writes the same back, in one go
		defer wg.Done()
		if _, err := peer.Write(data); err != nil {
			t.Error(err)
		}
		_ = peer.CloseWrite()
	}()

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
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := h.Sum(nil); total != size || !bytes.Equal(got, want[:]) {
		t.Fatalf("read %d bytes, checksum match %v", total, bytes.Equal(got, want[:]))
	}
	if !bulkSeen {
		t.Fatal("8 MiB read in 1 KiB and 256 KiB pieces never took the bulk path")
	}
}

func TestRawConnZeroLength(t *testing.T) {
	c, _ := rawPair(t)
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	if n, err := c.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) = %d, %v", n, err)
	}
}

// TestRawConnUnderTLS runs the way Ingress and Egress use the wrapper: the
// handshake over ordinary calls, then carried turns the raw calls on
// under the TLS connection; messages go both ways, and abort still resets
// the peer through both wrappers.
func TestRawConnUnderTLS(t *testing.T) {
	p := newPair(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerRaw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peerRaw.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	wrapped := newRawConn(accepted)
	r := wrapped.(*rawConn)
	server := tls.Server(wrapped, p.west.ServerConfig())
	peer := tls.Client(peerRaw, p.east.PeerConfig("west"))
	hs := make(chan error, 1)
	go func() { hs <- peer.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}
	if r.raw.Load() {
		t.Fatal("raw calls on before the stream was carried")
	}
	if got := carried(server); got != net.Conn(server) || !r.raw.Load() {
		t.Fatalf("carried(tls.Conn) = %T, raw %v; want the same connection, raw on", got, r.raw.Load())
	}
	buf := make([]byte, 1024)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte(i)}, 64)
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		n, err := server.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("message %d: %d bytes, %v", i, n, err)
		}
		if _, err := server.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf[:n]); err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("answer %d: %v", i, err)
		}
	}
	abort(server)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer read after abort: %v; want ECONNRESET", err)
	}
}

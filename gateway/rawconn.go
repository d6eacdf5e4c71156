package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// rawConn is a TCP connection whose small reads and writes, once its
// stream is carried, are made with raw system calls: through the runtime's
// poller as net.TCPConn's are (deadlines, waiting for readiness), but
// without telling the scheduler that a system call is under way.
//
// Why: a gateway that waits for the next message has every P idle, and the
// runtime's monitor thread (sysmon) then sleeps until woken. The first
// ordinary system call after the wait (the read of the message) wakes it,
// and it runs a few more times at 20 µs intervals before it sleeps again,
// on the same CPU as the proxy. Measured with gwbench (64-byte round trips,
// both proxies of a pair on one CPU), the gateway pair made 10.6 context
// switches and used 93 µs of CPU per round trip, HAProxy's pair 4.1 and
// 69 µs; with raw calls the gateway pair makes 4.1 and uses 61 µs. A read
// or write of a non-blocking socket does not block, so the scheduler loses
// nothing by not hearing of it.
//
// Bulk transfers keep the ordinary calls: a read that filled a buffer of
// at least bulkRead bytes makes the next read ordinary, and so does a write
// larger than rawMax. They keep sysmon awake, and with it the preemption of
// a goroutine that copies for long without waiting, which is what lets
// other streams on the same P have their turn.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn
	// raw turns the raw calls on. It is off until the stream is carried:
	// the TLS handshake and the CONNECT exchange keep the ordinary calls
	// (measured: raw calls there cost the connection rate 2 %).
	raw atomic.Bool

	// rmu serializes reads: the fields below it are one read's state,
	// shared with readFn, which runs inside rc.Read.
	rmu    sync.Mutex
	bulk   bool // the last read filled its buffer: more is likely waiting
	rbuf   []byte
	rn     int
	rerr   syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex // the same for writes
	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool

	// stall, once the stream is carried, is how long a write may go
	// without moving a byte before it fails (ns; 0: no bound): the idle
	// timeout, for a direction whose reader stopped reading (stall.go).
	stall atomic.Int64
	// clock is the stream's time of last activity, moved on as a
	// stalled write progresses.
	clock *atomic.Int64
	// userWD is the write deadline set through SetDeadline or
	// SetWriteDeadline, and armedWD the one the socket has (UnixNano; 0:
	// none).
	userWD, armedWD atomic.Int64
}

// rawMax is the largest write made with a raw call; a read that fills a
// buffer of at least bulkRead bytes marks a bulk transfer.
const (
	rawMax   = 16 << 10
	bulkRead = 1 << 10
)

// newRawConn wraps a TCP connection; any other connection (a pipe in
// tests, a TLS connection) is returned as it is.
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !rawCalls {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn = r.readRaw
	r.writeFn = r.writeRaw
	return r
}

// carried turns the raw calls on for a connection of a stream: a TCP
// connection is wrapped now, a TLS connection if its TCP connection was
// wrapped before the handshake (newRawConn in Ingress and Egress).
func carried(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		if r, ok := tc.NetConn().(*rawConn); ok {
			r.raw.Store(true)
		}
		return c
	}
	c = newRawConn(c)
	if r, ok := c.(*rawConn); ok {
		r.raw.Store(true)
	}
	return c
}

// NetConn returns the wrapped connection.
func (c *rawConn) NetConn() net.Conn { return c.TCPConn }

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.bulk || !c.raw.Load() {
		n, err := c.TCPConn.Read(p)
		c.bulk = n == len(p) && n >= bulkRead
		return n, err
	}
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	c.bulk = n == len(p) && n >= bulkRead
	return n, nil
}

// readRaw makes one read: false (wait, then call again) when the socket
// is empty.
func (c *rawConn) readRaw(fd uintptr) bool {
	for {
		n, e := rawRead(fd, c.rbuf)
		switch e {
		case 0:
			c.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

// write is one Write, without the stall bound.
func (c *rawConn) write(p []byte) (int, error) {
	if len(p) > rawMax || !c.raw.Load() {
		return c.TCPConn.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeRaw writes what is left of wbuf: false (wait, then call again)
// when the socket's send buffer is full.
func (c *rawConn) writeRaw(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		n, e := rawWrite(fd, rest)
		switch e {
		case 0:
			c.wn += n
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.werr = e
		return true
	}
	return true
}

// readWaiter returns the rawConn under src, whose next byte can be waited
// for without a buffer: src itself, or the TCP connection of a TLS one. Nil
// for any other connection.
func readWaiter(src net.Conn) *rawConn {
	if tc, ok := src.(*tls.Conn); ok {
		src = tc.NetConn()
	}
	r, _ := src.(*rawConn)
	return r
}

// waitReadable waits, without a buffer, until c has something to read:
// data, its end or an error, which the next Read returns. Its read deadline
// bounds the wait. Under TLS it is called only after a Read timed out: the
// TLS connection then holds no plaintext, nor a whole record, and its next
// byte must come from the socket.
func (c *rawConn) waitReadable() error {
	if err := c.rc.Read(peekReady); err != nil {
		return c.opError("read", err)
	}
	return nil
}

// opError wraps err as net.TCPConn does, so that callers that look for a
// timeout (net.Error) or a closed connection (net.ErrClosed) find it.
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

package gateway

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The copy path, in the shape of inetaf/tcpproxy: two named copy functions,
// each closing its write side when its source ends (half-close), waited for
// together; plus what tcpproxy leaves out: an idle timeout on the stream, and
// buffers that cost little while a connection is idle.

// Buffer sizes: a direction starts with the smallest and moves up one size
// each time a read fills its buffer, as ztunnel does, and back to the
// smallest when traffic slows (a short read). When it stops (no read for
// shrinkAfter) the direction gives its buffer back and waits for the next
// byte without one (rawConn.waitReadable), as HAProxy does, so that an
// idle connection holds no copy buffer; where it cannot wait so (not a TCP
// connection, or a system without the raw calls) it keeps the smallest, 1
// KB. A bulk stream does few large reads. The larger sizes are taken only
// within the process's budget (budget.go).
var bufSizes = [...]int{1 << 10, 16 << 10, 256 << 10}

var bufPools [len(bufSizes)]sync.Pool

// bufTaken and bufReturned count the buffers of each size taken and given
// back: their difference is what the streams hold now (tests read it).
var bufTaken, bufReturned [len(bufSizes)]atomic.Int64

func getBuf(class int) *[]byte {
	bufTaken[class].Add(1)
	if b, ok := bufPools[class].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, bufSizes[class])
	return &b
}

func putBuf(class int, b *[]byte) {
	bufReturned[class].Add(1)
	bufPools[class].Put(b)
}

// stream is one proxied connection: the side that connected to us and the
// side we dialled.
type stream struct {
	idle time.Duration
	// last is the time of the last read in either direction, or of a
	// write's progress (UnixNano): a stream is idle only when both
	// directions are.
	last atomic.Int64
	// sent and received count the bytes copied towards the target and back.
	sent, received func(int64)
}

// halfCloser is a connection whose two directions close apart (TCP, TLS).
type halfCloser interface {
	CloseWrite() error
}

type readCloser interface {
	CloseRead() error
}

// start copies both ways, each on a goroutine of its own, until both
// directions have ended (each by EOF, one side's half-close passed on to the
// other), or an error or the idle timeout aborts the stream. Then it closes
// both connections and calls done. Fresh goroutines, rather than the one
// that accepted and handshook, keep an idle stream's stacks small: a TLS
// handshake grows its goroutine's stack, and a stack does not shrink back
// while its goroutine lives on.
func (s *stream) start(client, target net.Conn, done func()) {
	client, target = carried(client), carried(target)
	s.last.Store(time.Now().UnixNano())
	// A direction whose reader stopped reading waits in Write: the idle
	// timeout bounds that wait too, counted from the last byte written.
	toClient, toTarget := s.boundWrites(client), s.boundWrites(target)
	var left atomic.Int32
	left.Store(2)
	finish := func() {
		if left.Add(-1) == 0 {
			client.Close()
			target.Close()
			done()
		}
	}
	go func() {
		defer finish()
		s.copyToTarget(target, client, toTarget)
	}()
	go func() {
		defer finish()
		s.copyToClient(client, target, toClient)
	}()
}

// copyToTarget carries what the client sends.
func (s *stream) copyToTarget(target, client net.Conn, bounded bool) {
	s.copy(target, client, s.sent, bounded)
}

// copyToClient carries what the target answers.
func (s *stream) copyToClient(client, target net.Conn, bounded bool) {
	s.copy(client, target, s.received, bounded)
}

func (s *stream) copy(dst, src net.Conn, count func(int64), bounded bool) {
	err := s.pump(dst, src, count, bounded)
	if err != nil {
		// A broken or idle stream: abort both ways, so the other copy
		// does not wait for its own timeout.
		abort(dst)
		abort(src)
		return
	}
	// EOF: pass the half-close on and let the other way finish.
	if hc, ok := dst.(halfCloser); ok {
		_ = hc.CloseWrite()
	} else {
		dst.Close()
	}
	if rc, ok := src.(readCloser); ok {
		_ = rc.CloseRead()
	}
}

// shrinkAfter is how long a direction waits for data before it gives its
// buffer back (for none, or for the smallest): a read cannot tell that it
// will be the last for a while, so an idle direction is found by the clock.
const shrinkAfter = time.Second

// copyBuf is a direction's buffer, nil while the direction waits without
// one; a larger one than the smallest holds its size reserved from the
// budget (budget.go).
type copyBuf struct {
	class int
	b     *[]byte
}

func newCopyBuf() copyBuf { return copyBuf{b: getBuf(0)} }

// grow moves up one size if the budget has the bytes, else keeps the
// buffer: the stream goes on, slower.
func (c *copyBuf) grow() {
	next := c.class + 1
	if !bufBudget.reserve(int64(bufSizes[next])) {
		return
	}
	c.put()
	c.class, c.b = next, getBuf(next)
}

// shrink goes back to the smallest size.
func (c *copyBuf) shrink() {
	c.put()
	c.class, c.b = 0, getBuf(0)
}

// put gives the buffer and its reservation back.
func (c *copyBuf) put() {
	if c.b == nil {
		return
	}
	putBuf(c.class, c.b)
	if c.class > 0 {
		bufBudget.release(int64(bufSizes[c.class]))
	}
	c.class, c.b = 0, nil
}

// pump copies src to dst until EOF (nil) or an error. bounded tells that
// dst's writes end themselves after the idle timeout without progress
// (boundWrites); otherwise each write gets a deadline here.
func (s *stream) pump(dst, src net.Conn, count func(int64), bounded bool) error {
	waiter := readWaiter(src)
	buf := newCopyBuf()
	defer func() { buf.put() }()
	lastRead := time.Now()
	s.arm(src, buf, waiter != nil, lastRead)
	for {
		if buf.b == nil {
			// Idle, without a buffer: take one when there is something
			// to read (or its end, or an error, which Read returns).
			err := waiter.waitReadable()
			if err == nil {
				buf = newCopyBuf()
				s.arm(src, buf, true, time.Now())
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			if s.idle > 0 && time.Since(time.Unix(0, s.last.Load())) >= s.idle {
				return err
			}
			s.arm(src, buf, true, lastRead)
			continue
		}
		n, err := src.Read(*buf.b)
		if n > 0 {
			lastRead = time.Now()
			s.last.Store(lastRead.UnixNano())
			if s.idle > 0 && !bounded {
				_ = dst.SetWriteDeadline(lastRead.Add(s.idle))
			}
			if _, werr := dst.Write((*buf.b)[:n]); werr != nil {
				return werr
			}
			count(int64(n))
			switch {
			case n == len(*buf.b) && buf.class < len(bufSizes)-1:
				buf.grow()
				if buf.class == 1 && waiter == nil {
					s.arm(src, buf, false, lastRead)
				}
			case n < bufSizes[0] && buf.class > 0:
				buf.shrink()
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			now := time.Now()
			// Idle only if the other direction was too.
			if s.idle > 0 && now.Sub(time.Unix(0, s.last.Load())) >= s.idle {
				return err
			}
			if now.Sub(lastRead) >= shrinkAfter {
				if waiter != nil {
					// Nothing is buffered in src now (a Read that
					// timed out returned no data): the next byte
					// must come from the socket, which can be
					// waited on without a buffer.
					buf.put()
				} else if buf.class > 0 {
					buf.shrink()
				}
			}
			s.arm(src, buf, waiter != nil, lastRead)
			continue
		}
		return err
	}
}

// arm sets src's read deadline to the sooner of the idle timeout (counted
// from the last read either way) and, while the direction holds a buffer it
// would give back when idle (a larger one, or any when it can wait without
// one), the time to give it back: shrinkAfter after the last read. The
// deadline is not moved by each read: when it passes, pump looks at the
// time of the last read and sets the next one.
func (s *stream) arm(src net.Conn, buf copyBuf, canWait bool, lastRead time.Time) {
	var d time.Time
	if s.idle > 0 {
		d = time.Unix(0, s.last.Load()).Add(s.idle)
	}
	if buf.b != nil && (buf.class > 0 || canWait) {
		if shrink := lastRead.Add(shrinkAfter); d.IsZero() || shrink.Before(d) {
			d = shrink
		}
	}
	_ = src.SetReadDeadline(d)
}

// abort closes a connection so that its peer sees a reset rather than an
// orderly end: the stream broke, and the peer must not take a truncated
// stream for a whole one.
func abort(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		// Not Close: its close_notify would read as an orderly end.
		c = tc.NetConn()
	}
	if lc, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = lc.SetLinger(0)
	}
	c.Close()
}

// limiter bounds concurrent connections.
type limiter chan struct{}

func newLimiter(n int) limiter { return make(limiter, n) }

// acquire takes a place without waiting, and reports whether it got one.
func (l limiter) acquire() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l limiter) release() { <-l }

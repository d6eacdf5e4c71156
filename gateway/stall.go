package gateway

import (
	"errors"
	"net"
	"os"
	"time"
)

// A direction whose reader stopped reading waits in Write, and a Write
// has no deadline of its own: the idle timeout, which the reads see, must
// bound that wait too, or a stream whose other direction has ended lives
// for ever, its buffer with it. The bound is on progress, not on the
// Write: a slow reader that takes a byte now and then is served however
// long a large write takes. It is kept by rawConn, under TLS, because a
// tls.Conn whose Write has timed out is broken for good: the deadline
// must fire only when the stream is to end.

// boundWrites gives c's writes the stall bound of the stream's idle
// timeout, and reports whether c keeps it (a TCP connection, or TLS over
// one, on a Unix system); pump sets plain write deadlines on others.
func (s *stream) boundWrites(c net.Conn) bool {
	if s.idle <= 0 {
		return true // nothing to bound
	}
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		if r, ok := tc.NetConn().(*rawConn); ok {
			c = r
		}
	}
	r, ok := c.(*rawConn)
	if !ok {
		return false
	}
	r.clock = &s.last
	r.stall.Store(int64(s.idle))
	return true
}

// Write writes p. With the stall bound, a write that moves no byte for
// stall fails with a timeout; one that moves some goes on. The socket's
// deadline is moved at most every stall/4 while a write waits, and not
// at all while writes go through, so that the bound costs the message
// path nothing; the failure comes between stall and 1.25 stall after the
// last progress. A deadline set by the caller (tls.Conn's close_notify
// sets one) is kept.
func (c *rawConn) Write(p []byte) (int, error) {
	stall := time.Duration(c.stall.Load())
	if stall <= 0 {
		return c.write(p)
	}
	last := time.Now()
	if a := c.armedWD.Load(); a == 0 || a <= last.UnixNano() {
		c.armWrite(last, last, stall)
	}
	n := 0
	for {
		m, err := c.write(p[n:])
		n += m
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		now := time.Now()
		if u := c.userWD.Load(); u != 0 && now.UnixNano() >= u {
			return n, err
		}
		if m > 0 {
			last = now
			if c.clock != nil {
				c.clock.Store(now.UnixNano())
			}
		}
		if now.Sub(last) >= stall {
			return n, err
		}
		c.armWrite(now, last, stall)
	}
}

// armWrite sets the socket's write deadline to the next check: stall/4
// from now, the end of the bound, or the caller's deadline, the soonest.
func (c *rawConn) armWrite(now, last time.Time, stall time.Duration) {
	d := min(now.Add(stall/4).UnixNano(), last.Add(stall).UnixNano())
	if u := c.userWD.Load(); u != 0 {
		d = min(d, u)
	}
	c.armedWD.Store(d)
	_ = c.TCPConn.SetWriteDeadline(time.Unix(0, d))
}

// SetDeadline sets both deadlines, as net.Conn's does.
func (c *rawConn) SetDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.TCPConn.SetDeadline(t)
}

// SetWriteDeadline sets the write deadline, as net.Conn's does.
func (c *rawConn) SetWriteDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *rawConn) noteWriteDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.userWD.Store(ns)
	c.armedWD.Store(ns)
}

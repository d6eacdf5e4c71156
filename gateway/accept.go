package gateway

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Accept's retry after a temporary failure, as net/http's Server.Serve
// has it: 5 ms, doubling, at most 1 s.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// acceptLogEvery bounds the log of accept failures: one line at most
	// this often per listener, with the number of failures since the last.
	acceptLogEvery = 10 * time.Second
)

// acceptLoop accepts connections on ln and hands each to serve, until ln is
// closed or ctx ends (nil), or Accept fails in a way that will not pass
// (the error: the caller closes ln, so that clients are refused rather
// than left waiting in its backlog).
//
// A temporary failure, most of all a process or a system out of file
// descriptors (EMFILE, ENFILE), does not end the loop: a listener that
// stays bound while nobody accepts on it would let clients connect and
// hang. The loop waits, 5 ms doubling to 1 s, and tries again, as
// net/http's Server does; each failure is counted in accept_errors_total
// and logged, at most once every 10 s per listener.
func acceptLoop(ctx context.Context, logger klog.Logger, direction string, ln net.Listener, serve func(net.Conn)) error {
	var (
		delay    time.Duration
		lastLog  time.Time
		failures int
	)
	for {
		c, err := ln.Accept()
		if err == nil {
			delay = 0
			serve(c)
			continue
		}
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return nil
		}
		acceptErrors.WithLabelValues(direction).Inc()
		if !temporaryAcceptError(err) {
			return err
		}
		delay = min(max(2*delay, acceptRetryMin), acceptRetryMax)
		failures++
		if now := time.Now(); now.Sub(lastLog) >= acceptLogEvery {
			logger.Error(err, "Cannot accept connections; trying again", "address", ln.Addr().String(),
				"failures", failures, "retryIn", delay)
			lastLog, failures = now, 0
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// temporaryAcceptError tells whether Accept may succeed again after err:
// any error of the system call (out of descriptors or memory, the network
// errors of a connection that Linux reports from accept(2), which its
// manual says to treat as EAGAIN) but those that say that the listening
// socket itself is unusable; and a timeout.
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EBADF, syscall.EINVAL, syscall.ENOTSOCK, syscall.EFAULT:
		return false
	}
	return true
}

package gateway

import (
	"net"
	"sync"
)

// connSet holds the connections a side has accepted and not yet ended,
// handshakes and streams alike: what Abort resets when the shutdown grace
// is over.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
	// aborted: Abort has run; a connection added later is reset at once.
	aborted bool
}

// add records c. It reports false, having reset c, once Abort has run.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted {
		abort(c)
		return false
	}
	if s.m == nil {
		s.m = map[net.Conn]struct{}{}
	}
	s.m[c] = struct{}{}
	return true
}

// remove forgets c; it may be called again, or for a connection Abort
// reset.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
}

// abortAll resets every connection held, and every one added from now on,
// and returns how many it reset. Each stream's copy then fails and resets
// the stream's other connection too: both ends see a reset, never the
// orderly end that would pass a cut stream off as a complete one.
func (s *connSet) abortAll() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = true
	n := len(s.m)
	for c := range s.m {
		abort(c)
		delete(s.m, c)
	}
	return n
}

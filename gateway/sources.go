package gateway

import (
	"net"
	"net/netip"
	"sync"
)

// sourceLimit bounds the concurrent connections of each source: a client's
// IP address on the egress, a peer cluster on the ingress. --max-connections
// bounds them all together, and one source could take every place: one pod
// of one cluster would then hold its egress and the peer's ingress. The map
// holds the sources that have connections open, no more.
type sourceLimit[K comparable] struct {
	// max is the bound of each source; 0 or less: none.
	max int

	mu sync.Mutex
	n  map[K]int
}

// acquire takes a place of k, and reports whether there was one.
func (l *sourceLimit[K]) acquire(k K) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[k] >= l.max {
		return false
	}
	if l.n == nil {
		l.n = map[K]int{}
	}
	l.n[k]++
	return true
}

// release gives back a place acquire took.
func (l *sourceLimit[K]) release(k K) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[k]--; l.n[k] <= 0 {
		delete(l.n, k)
	}
}

// sourceIP is the address a connection comes from (the zero Addr for one
// that is not TCP).
func sourceIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

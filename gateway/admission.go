package gateway

import (
	"container/list"
	"net"
	"sync"
)

// admission bounds the ingress's connections, and decides who keeps a place
// when they run out. A connection is pending from its accept until its
// CONNECT request (or probe) has been read: until then it is nobody we know
// (the TLS handshake may not even have started) or a peer that is slow to
// say what it wants. Once its request is read it is established, and keeps
// its place until it ends.
//
// When every place is taken, a new connection takes the place of the oldest
// pending one, which is closed: a flood of connections that never finish
// their handshake (a burst, a slow-loris client) then holds at most the
// places established streams leave free, each for no longer than the
// handshake timeout, and cannot keep a peer whose handshake takes
// milliseconds from getting in. Established streams are never evicted: when
// they hold every place, a new connection is refused.
type admission struct {
	// limit is the number of places.
	limit int
	// perPeer bounds the places of one peer's requests (claim).
	perPeer sourceLimit[string]

	mu sync.Mutex
	// taken is the number of places held, pending and established.
	taken int
	// pending are the pending connections, oldest first.
	pending list.List
}

// pendingConn is a connection's place.
type pendingConn struct {
	conn net.Conn
	// elem is its entry in pending while it is pending, nil after.
	elem *list.Element
	// evicted is set when a newer connection took its place.
	evicted bool
	// peer is the cluster of its client certificate, once verified.
	peer string
	// claimed: its request counts against its peer's bound.
	claimed bool
}

func newAdmission(limit, perPeer int) *admission {
	return &admission{limit: limit, perPeer: sourceLimit[string]{max: perPeer}}
}

// admit takes a place for c. With none free it takes the oldest pending
// connection's, and returns that one, for the caller to close and count.
// It returns nil when every place is held by an established stream.
func (a *admission) admit(c net.Conn) (p, evicted *pendingConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.taken >= a.limit {
		oldest := a.pending.Front()
		if oldest == nil {
			return nil, nil
		}
		evicted = a.pending.Remove(oldest).(*pendingConn)
		evicted.elem = nil
		evicted.evicted = true
		a.taken-- // given to c below
	}
	a.taken++
	p = &pendingConn{conn: c}
	p.elem = a.pending.PushBack(p)
	return p, evicted
}

// identified records the verified peer of a pending connection.
func (a *admission) identified(p *pendingConn, peer string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p.peer = peer
}

// establish ends p's pending time: it can no longer be evicted. It reports
// false when it was evicted already (and its place is another's).
func (a *admission) establish(p *pendingConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.evicted {
		return false
	}
	if p.elem != nil {
		a.pending.Remove(p.elem)
		p.elem = nil
	}
	return true
}

// claim counts p, established, against its peer's bound, and reports
// false when the peer has no place left. Only requests for a stream
// claim: a peer at its bound still answers probes.
func (a *admission) claim(p *pendingConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.perPeer.acquire(p.peer) {
		return false
	}
	p.claimed = true
	return true
}

// wasEvicted reports whether a newer connection took p's place.
func (a *admission) wasEvicted(p *pendingConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return p.evicted
}

// release gives p's place back, unless a newer connection has it already.
// It is called once for each admitted connection.
func (a *admission) release(p *pendingConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.evicted {
		return
	}
	if p.elem != nil {
		a.pending.Remove(p.elem)
		p.elem = nil
	}
	if p.claimed {
		a.perPeer.release(p.peer)
	}
	a.taken--
}

// active returns the places held, pending and established.
func (a *admission) active() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.taken
}

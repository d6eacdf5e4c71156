package controller

import (
	"github.com/mcmirror/mcmirror/internal/labels"

	"errors"
	"sync"
)

// PortRange is an inclusive range of egress ports. Its zero value is unset,
// and contains every port: New refuses it.
type PortRange = labels.PortRange

// errPortsExhausted is returned when every port of the range is taken.
var errPortsExhausted = errors.New("egress port range exhausted")

// portAllocator hands out egress ports. An owner is one port of one mirror
// Service ("ns/name/80/TCP"); a group is the work-queue key of the exported
// Service the mirror belongs to, so that one sync can release every port its
// Service no longer needs. It is safe for concurrent use.
type portAllocator struct {
	mu sync.Mutex
	r  PortRange
	// byPort is the owner of each allocated port: never two owners on one.
	byPort map[int32]string
	// byOwner is the port of each owner.
	byOwner map[string]int32
	// groups lists the owners of each group.
	groups map[string]map[string]bool
	// next is where the search for a free port starts: next-fit, so that a
	// released port is reused as late as possible and a gateway connection
	// to the old destination is long gone when it is.
	next int32
}

// newPortAllocator allocates from r, which New has checked is set.
func newPortAllocator(r PortRange) *portAllocator {
	portsCapacity.Set(float64(r.Size()))
	return &portAllocator{r: r, byPort: map[int32]string{}, byOwner: map[string]int32{}, groups: map[string]map[string]bool{}, next: r.First}
}

// Allocate returns owner's port: the one it has, else preferred when it is
// free and in range (the port recorded on the mirror before a restart), else
// the next free one.
func (a *portAllocator) Allocate(group, owner string, preferred int32) (int32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.byOwner[owner]; ok {
		return p, nil
	}
	if _, taken := a.byPort[preferred]; !taken && preferred != 0 && a.r.Contains(preferred) {
		a.take(group, owner, preferred)
		return preferred, nil
	}
	size := int32(a.r.Size())
	for i := range size {
		p := a.r.First + (a.next-a.r.First+i)%size
		if _, taken := a.byPort[p]; !taken {
			a.take(group, owner, p)
			a.next = p + 1
			if a.next > a.r.Last {
				a.next = a.r.First
			}
			return p, nil
		}
	}
	portsExhaustedTotal.Inc()
	return 0, errPortsExhausted
}

// Claim gives port to owner if it is free and in range, as at start-up when
// the ports recorded on existing mirrors are read back. It reports whether
// the owner has that port now.
func (a *portAllocator) Claim(group, owner string, port int32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.byOwner[owner]; ok {
		return p == port
	}
	if _, taken := a.byPort[port]; taken || !a.r.Contains(port) {
		return false
	}
	a.take(group, owner, port)
	return true
}

func (a *portAllocator) take(group, owner string, p int32) {
	a.byPort[p] = owner
	a.byOwner[owner] = p
	if a.groups[group] == nil {
		a.groups[group] = map[string]bool{}
	}
	a.groups[group][owner] = true
	portsAllocated.Set(float64(len(a.byPort)))
}

// ReleaseExcept releases every port of group whose owner is not in keep, and
// returns how many it released.
func (a *portAllocator) ReleaseExcept(group string, keep map[string]bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for owner := range a.groups[group] {
		if keep[owner] {
			continue
		}
		p := a.byOwner[owner]
		delete(a.byPort, p)
		delete(a.byOwner, owner)
		delete(a.groups[group], owner)
		n++
	}
	if len(a.groups[group]) == 0 {
		delete(a.groups, group)
	}
	portsAllocated.Set(float64(len(a.byPort)))
	return n
}

// Port returns owner's port, if it has one.
func (a *portAllocator) Port(owner string) (int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.byOwner[owner]
	return p, ok
}

// Owner returns the owner of port, if it is allocated.
func (a *portAllocator) Owner(port int32) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.byPort[port]
	return o, ok
}

// Len returns the number of allocated ports.
func (a *portAllocator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byPort)
}

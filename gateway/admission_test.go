package gateway

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The places of the ingress: pending connections give theirs to newcomers,
// oldest first; established ones never do; a released place is free again,
// and an evicted one is not released twice.
func TestAdmission(t *testing.T) {
	a := newAdmission(3, 0)
	conn := func() net.Conn { c, _ := net.Pipe(); return c }
	p1, ev := a.admit(conn())
	require.NotNil(t, p1)
	require.Nil(t, ev)
	p2, _ := a.admit(conn())
	p3, _ := a.admit(conn())
	require.True(t, a.establish(p2), "p2 established")
	assert.Equal(t, 3, a.active())

	// Full: p4 takes the place of the oldest pending, p1.
	p4, ev := a.admit(conn())
	require.NotNil(t, p4)
	assert.Same(t, p1, ev)
	assert.True(t, a.wasEvicted(p1))
	assert.False(t, a.establish(p1), "an evicted connection is not established")
	a.release(p1) // its handler ends: no place is given back twice
	assert.Equal(t, 3, a.active())

	// Then p3; p2, established, is never taken.
	p5, ev := a.admit(conn())
	assert.Same(t, p3, ev)
	require.True(t, a.establish(p4))
	require.True(t, a.establish(p5))
	p6, ev := a.admit(conn())
	assert.Nil(t, p6, "every place established: refused")
	assert.Nil(t, ev)
	assert.False(t, a.wasEvicted(p2))

	a.release(p2)
	assert.Equal(t, 2, a.active())
	p7, ev := a.admit(conn())
	require.NotNil(t, p7)
	assert.Nil(t, ev, "a free place: nobody evicted")
	a.release(p7) // pending, released: leaves the queue too
	a.release(p4)
	a.release(p5)
	assert.Equal(t, 0, a.active())
	assert.Zero(t, a.pending.Len())
}

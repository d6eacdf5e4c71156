package controller

import (
	"fmt"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every owner gets its own port, never two owners one port; the range is
// handed out next-fit; a full range is an error, not a panic; released
// ports come back.
func TestPortAllocatorProperties(t *testing.T) {
	a := newPortAllocator(PortRange{First: 100, Last: 109})
	seen := map[int32]string{}
	for i := range 10 {
		owner := fmt.Sprintf("ns/svc-%d/80/TCP", i)
		p, err := a.Allocate("g", owner, 0)
		require.NoError(t, err)
		assert.True(t, p >= 100 && p <= 109)
		_, dup := seen[p]
		assert.False(t, dup, "port %d given twice", p)
		seen[p] = owner
		// Asking again returns the same port.
		again, err := a.Allocate("g", owner, 0)
		require.NoError(t, err)
		assert.Equal(t, p, again)
	}
	_, err := a.Allocate("g", "ns/one-too-many/80/TCP", 0)
	assert.ErrorIs(t, err, errPortsExhausted)

	// Release all but svc-0: nine ports come back.
	assert.Equal(t, 9, a.ReleaseExcept("g", map[string]bool{"ns/svc-0/80/TCP": true}))
	assert.Equal(t, 1, a.Len())
	p0, _ := a.Port("ns/svc-0/80/TCP")

	// A preferred port is honoured when free, and not when taken.
	p, err := a.Allocate("h", "ns/x/80/TCP", 105)
	require.NoError(t, err)
	assert.Equal(t, int32(105), p)
	p, err = a.Allocate("h", "ns/y/80/TCP", 105)
	require.NoError(t, err)
	assert.NotEqual(t, int32(105), p)
	assert.NotEqual(t, p0, p)
	// Out of range preferences are ignored.
	p, err = a.Allocate("h", "ns/z/80/TCP", 5)
	require.NoError(t, err)
	assert.True(t, p >= 100 && p <= 109)
}

// Next-fit: a released port is not the next one handed out.
func TestPortAllocatorDelaysReuse(t *testing.T) {
	a := newPortAllocator(PortRange{First: 100, Last: 103})
	p1, _ := a.Allocate("g", "a", 0)
	a.ReleaseExcept("g", nil)
	p2, _ := a.Allocate("g", "b", 0)
	assert.NotEqual(t, p1, p2)
}

func TestPortAllocatorClaim(t *testing.T) {
	a := newPortAllocator(PortRange{First: 100, Last: 109})
	assert.True(t, a.Claim("g", "a", 103))
	assert.True(t, a.Claim("g", "a", 103), "claiming one's own port again")
	assert.False(t, a.Claim("g", "b", 103), "taken")
	assert.False(t, a.Claim("g", "c", 200), "out of range")
	p, err := a.Allocate("g", "a", 0)
	require.NoError(t, err)
	assert.Equal(t, int32(103), p)
}

func TestEgressPortsAnnotation(t *testing.T) {
	m := map[string]int32{"80/TCP": 30000, "53/UDP": 30001}
	s := labels.FormatEgressPorts(m)
	assert.Equal(t, "53/UDP=30001,80/TCP=30000", s)
	assert.Equal(t, m, labels.ParseEgressPorts(s))
	assert.Equal(t, map[string]int32{"80/TCP": 1}, labels.ParseEgressPorts("80/TCP=1,bad,x=2,9/TCP=70000"))
	assert.Empty(t, labels.ParseEgressPorts(""))
}

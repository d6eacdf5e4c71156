package gateway

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client of the egress reaches the target behind the ingress, both ways,
// and a half-close passes through: the target sees EOF and still answers.
func TestEgressToIngressEcho(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "hello from west\n")
	p.resolver.set(Destination{Namespace: "default", Service: "web", Port: 80}, echo.addr)
	port := p.mirror(t, "web", "", 80)

	c := dialEgress(t, port)
	_, err := io.WriteString(c, "ping")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "hello from west\nping", string(got))
}

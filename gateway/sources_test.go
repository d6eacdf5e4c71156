package gateway

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialEgressFrom connects to an egress port from a given loopback address.
func dialEgressFrom(t *testing.T, from string, port int32) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", egressAddr(port))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// One client address holds at most MaxConnsPerSource egress connections:
// one more is reset and counted (too_many_from_source), while another
// address is served, and a place given back is taken again.
func TestEgressBoundsConnectionsPerSource(t *testing.T) {
	const perSource = 3
	p := newPair(t, func(_ *Ingress, eg *Egress) { eg.MaxConnsPerSource = perSource })
	echo := startEcho(t, "hi")
	port := p.serveWeb(t, echo.addr)

	var held []net.Conn
	for range perSource {
		c := dialEgressFrom(t, "127.0.0.1", port)
		readGreeting(t, c, "hi")
		held = append(held, c)
	}
	requireDialResetCounted(t, egressAddr(port), "", DirectionEgress, ReasonTooManyFromSource)

	other := dialEgressFrom(t, "127.0.0.2", port)
	readGreeting(t, other, "hi")

	held[0].Close()
	require.Eventually(t, servedAgain(port, "hi"), eventBound, 50*time.Millisecond,
		"the place given back was not taken again")
}

// One peer cluster holds at most MaxConnsPerPeer streams of the ingress:
// one more is answered 503 too_many_from_peer and counted with its
// cluster, its probes are still answered, and another cluster is served.
func TestIngressBoundsStreamsPerPeer(t *testing.T) {
	const perPeer = 2
	p, _ := exportsPair(t, func(in *Ingress, _ *Egress) { in.MaxConnsPerPeer = perPeer })
	for range perPeer {
		p.openStream(t)
	}
	p.requireRefusal(t, p.ingressAddr, nil, connectRequest("web.default:80"), "east",
		http.StatusServiceUnavailable, ReasonTooManyFromPeer)

	resp, _ := connect(t, dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil)), "GET "+ProbePath+" HTTP/1.1\r\nHost: west\r\n\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a peer at its bound is probed as alive")

	paris := issue(t, p.ca, "paris", gatewaytest.Options{})
	resp, _ = connect(t, dialIngress(t, p.ingressAddr, clientTLS(t, paris)), connectRequest("web.default:80"))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another cluster is served")
}

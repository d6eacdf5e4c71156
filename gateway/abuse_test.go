package gateway

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client whose certificate chains to the shared root but names a cluster
// the ingress does not allow is refused before its request is looked at:
// 403 cluster_not_allowed, counted with its cluster, probes included, and
// the target sees nothing. The allowed cluster is served meanwhile. With no
// allow-list, the same certificate is served.
func TestIngressRefusesClusterNotAllowed(t *testing.T) {
	p, target := exportsPair(t, func(in *Ingress, _ *Egress) { in.AllowClusters = map[string]bool{"east": true} })
	paris, err := p.ca.Issue("paris", gatewaytest.Options{})
	require.NoError(t, err)

	for _, request := range []string{connectRequest("web.default:80"), "GET " + ProbePath + " HTTP/1.1\r\nHost: west\r\n\r\n"} {
		before := refusals("paris", DirectionIngress, ReasonClusterNotAllowed)
		seen := target.count()
		c := dialIngress(t, p.ingressAddr, clientTLS(t, paris))
		resp, _ := connect(t, c, request)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Equal(t, string(ReasonClusterNotAllowed), resp.Header.Get("X-Mcmirror-Reason"))
		assert.Equal(t, before+1, refusals("paris", DirectionIngress, ReasonClusterNotAllowed), "refusals_total{peer=paris,reason=cluster_not_allowed}")
		p.allowedOnce(t, "web.default:80")
		assert.Equal(t, seen+1, target.count(), "the target saw a connection of a cluster not allowed")
	}

	open, _ := exportsPair(t)
	paris, err = open.ca.Issue("paris", gatewaytest.Options{})
	require.NoError(t, err)
	c := dialIngress(t, open.ingressAddr, clientTLS(t, paris))
	resp, _ := connect(t, c, connectRequest("web.default:80"))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "without an allow-list, any cluster of the root")
}

// holdOpen opens n TCP connections to addr that never start TLS, as a
// flood or a slow-loris client does, and closes them when t ends.
func holdOpen(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// closedByPeer reads c, which the ingress must have closed: EOF or a
// reset, not our deadline.
func closedByPeer(c net.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	switch {
	case err == nil:
		return errors.New("read data")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err
	}
	return nil
}

// With every place held by connections that never finish their handshake,
// a peer still gets in: each newcomer takes the place of the oldest
// pending connection, which is closed at once and counted. Established
// streams keep their places and go on working. The number of connections
// never exceeds MaxConns.
func TestIngressEvictsPendingForNewcomers(t *testing.T) {
	const limit, flood, streams = 20, 200, 5
	p, _ := exportsPair(t, func(in *Ingress, _ *Egress) {
		in.MaxConns = limit
		in.HandshakeTimeout = time.Minute // the flood never times out here
	})
	var open []*bufio.Reader
	var openConns []*tls.Conn
	for range streams {
		c := dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil))
		resp, br := connect(t, c, connectRequest("web.default:80"))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "west here\n", line)
		open, openConns = append(open, br), append(openConns, c)
	}

	evictedBefore := refusals("", DirectionIngress, ReasonEvicted)
	tooManyBefore := refusals("", DirectionIngress, ReasonTooMany)
	held := holdOpen(t, p.ingressAddr, flood)
	// Positive evidence that the ingress took every one of them: all
	// but the places left beside the streams were evicted.
	require.Eventually(t, func() bool {
		return refusals("", DirectionIngress, ReasonEvicted)-evictedBefore == flood-(limit-streams)
	}, 10*time.Second, 5*time.Millisecond, "evictions: %v", refusals("", DirectionIngress, ReasonEvicted)-evictedBefore)
	assert.Equal(t, limit, p.ingress.Active(), "places held")
	// The oldest were closed at once, the newest are still held.
	for i, c := range held[:flood-(limit-streams)] {
		require.NoError(t, closedByPeer(c, 5*time.Second), "held connection %d not closed", i)
	}
	for i, c := range held[flood-(limit-streams):] {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "pending connection %d closed while places were free", i)
	}

	// A peer gets in, again and again.
	for range 30 {
		p.allowedOnce(t, "web.default:80")
		assert.LessOrEqual(t, p.ingress.Active(), limit)
	}
	assert.Equal(t, tooManyBefore, refusals("", DirectionIngress, ReasonTooMany), "nobody was refused while pending connections held places")
	// The established streams were never evicted.
	for i, c := range openConns {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(c, "still here\n")
		require.NoError(t, err, "stream %d", i)
		line, err := open[i].ReadString('\n')
		require.NoError(t, err, "stream %d", i)
		assert.Equal(t, "still here\n", line)
	}
}

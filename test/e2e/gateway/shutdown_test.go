package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On SIGTERM (a rolling update) the ingress fails its readiness and, after
// its drain delay (none here: cmd/coredns-mc's TestGatewaySIGTERMDrainsThenResets
// covers the delay), stops taking connections, while the streams already
// open go on; the process exits, cleanly, once the last one ends.
func TestShutdownDrainsStreams(t *testing.T) {
	f := startFleet(t, "--drain-delay", "0s")
	_, m := exportWeb(t, "gw-drain", nil, "web-a")
	addr := m.addr()
	waitGreet(t, addr, wait, "the path works before the shutdown")

	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	r := bufio.NewReader(conn)
	greeting, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "hello from west/web-a\n", greeting)

	proc := f.Gateways["west"].Process()
	require.NoError(t, proc.Signal(syscall.SIGTERM))
	// Evidence that the signal was taken: readiness fails.
	require.Eventually(t, func() bool {
		resp, err := http.Get(f.Gateways["west"].MetricsURL + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "shutting down")
	}, 10*time.Second, tick, "west's gateway fails /readyz once told to stop")

	// The open stream goes on, both ways.
	for i := range 3 {
		msg := strings.Repeat("x", i+1) + " after SIGTERM\n"
		_, err := io.WriteString(conn, msg)
		require.NoError(t, err)
		echo, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, msg, echo)
	}
	// A new one is refused: the ingress no longer listens.
	expectReset(t, addr, 5*time.Second)
	env.RequireAlive(t, proc)

	// The last stream ends: the process exits, with status 0.
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Empty(t, rest)
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("west's gateway still running 10 s after its last stream ended\n%s", proc.Tail(20))
	}
	_, exitErr := proc.Exited()
	assert.NoError(t, exitErr, "a drained shutdown exits 0")
	assert.Contains(t, proc.Tail(50), "Draining")
}

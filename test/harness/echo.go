package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The client side of EchoServer, as a test reaches it through a gateway.

// LoopbackAddr is 127.0.0.1:port, where a gateway StartGateway runs on the
// host serves its egress ports.
func LoopbackAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Hello reads EchoServer's greeting from r and returns the pod it names
// ("west/web-0").
func Hello(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("greeting: %w (read %q)", err, line)
	}
	pod, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "hello from ")
	if !ok {
		return "", fmt.Errorf("greeting %q", line)
	}
	return pod, nil
}

// GreetConn reads EchoServer's greeting from conn, through r, and has a
// line echoed, which proves the stream carries bytes both ways; it returns
// the pod the greeting names. conn stays open.
func GreetConn(conn net.Conn, r *bufio.Reader) (string, error) {
	pod, err := Hello(r)
	if err != nil {
		return "", err
	}
	const ping = "ping through the gateway\n"
	if _, err := io.WriteString(conn, ping); err != nil {
		return "", err
	}
	echo, err := r.ReadString('\n')
	if err != nil || echo != ping {
		return "", fmt.Errorf("echo: %q, %v", echo, err)
	}
	return pod, nil
}

// Greet connects to an EchoServer at addr, directly or through a gateway,
// and is GreetConn on that connection.
func Greet(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return GreetConn(conn, bufio.NewReader(conn))
}

// RunEchoPods starts an EchoServer on port as each pod of c named, and
// waits until each answers Greet at its own address with its name, so
// that what a test then sees through a gateway is the gateway's doing, not
// a server still starting.
func (c *Cluster) RunEchoPods(t testing.TB, port int, names ...string) []*Pod {
	t.Helper()
	var pods []*Pod
	for _, n := range names {
		pods = append(pods, c.RunPod(t, n, EchoServer(port)))
	}
	for _, p := range pods {
		addr := net.JoinHostPort(p.IP.String(), strconv.Itoa(port))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			done, err := p.Process.Exited()
			require.False(ct, done, "pod %s exited: %v\n%s", p.Name, err, p.Process.Tail(10))
			got, err := Greet(addr)
			require.NoError(ct, err)
			assert.Equal(ct, c.Name+"/"+p.Name, got)
		}, 60*time.Second, 50*time.Millisecond, "pod %s/%s answers at %s", c.Name, p.Name, addr)
	}
	return pods
}

// WaitGreet polls Greet of addr until it succeeds within d, and returns the
// pod it reached.
func WaitGreet(t testing.TB, addr string, d time.Duration, msg string) string {
	t.Helper()
	var pod string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		pod, err = Greet(addr)
		require.NoError(c, err)
	}, d, 50*time.Millisecond, msg)
	return pod
}

package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// exportService creates in west a selector-less Service ns/name, port http
// 80 → 8080, labelled lbls (exported in gateway mode when nil), headless or
// not, and an EndpointSlice with the pods' addresses, ready, with their
// names as hostnames when headless. Both are deleted when t ends.
func exportService(t *testing.T, ns, name string, headless bool, pods []*harness.Pod, lbls map[string]string) {
	t.Helper()
	if lbls == nil {
		lbls = map[string]string{labels.Exported: labels.ExportGateway}
	}
	env.Cluster("west").CreateSelectorless(t, ns, name, harness.SelectorlessService{Labels: lbls, Headless: headless,
		Port: servicePort, TargetPort: podPort, Endpoints: harness.PodAddrs(pods)})
}

// exportWeb runs echo pods named pods in west and exports them as web,
// labelled lbls (exportService), in a new namespace named from base; it
// returns the namespace and east's mirror of web, once east's controller
// has made it.
func exportWeb(t *testing.T, base string, lbls map[string]string, pods ...string) (string, mirror) {
	t.Helper()
	ns := env.UniqueNamespace(t, base)
	exportService(t, ns, "web", false, env.Cluster("west").RunEchoPods(t, podPort, pods...), lbls)
	return ns, waitMirror(t, ns, "web-west")
}

// mirror is what east's controller made for a remote Service or pod.
type mirror struct {
	ClusterIP  string
	EgressPort int
}

// addr is where a client in east connects to reach the mirror: its egress
// port on 127.0.0.1, where east's gateway binds its egress ports.
func (m mirror) addr() string { return harness.LoopbackAddr(m.EgressPort) }

// waitMirror waits until east holds the mirror Service ns/name with a
// ClusterIP and an egress port recorded for the Service port, and returns
// them.
func waitMirror(t *testing.T, ns, name string) mirror {
	t.Helper()
	var m mirror
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc, err := env.Cluster("east").Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(c, err)
		require.Equal(c, "west", svc.Labels[labels.ClusterName])
		ports := labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])
		p, ok := ports[labels.EgressPortKey(servicePort, string(corev1.ProtocolTCP))]
		require.True(c, ok, "%s: egress port of %d/TCP in %q", name, servicePort, svc.Annotations[labels.EgressPorts])
		require.NotEmpty(c, svc.Spec.ClusterIP)
		m = mirror{ClusterIP: svc.Spec.ClusterIP, EgressPort: int(p)}
	}, wait, tick, "east: mirror %s/%s with an egress port", ns, name)
	return m
}

// greetStream connects to addr, reads the echo server's greeting and
// returns the pod it names ("west/web-0"). It also proves the stream
// carries bytes both ways and passes a half-close on: what it writes comes
// back, and once it closes its side the server's side closes too. It tells
// a failure before the pod's greeting (the stream was not established)
// from one after (an established stream was cut).
func greetStream(addr string) (pod string, established bool, err error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", false, fmt.Errorf("greeting: %w (read %q)", err, line)
	}
	pod, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "hello from ")
	if !ok {
		return "", true, fmt.Errorf("greeting %q", line)
	}
	const ping = "ping through the gateway\n"
	if _, err := io.WriteString(conn, ping); err != nil {
		return "", true, err
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != ping {
		return "", true, fmt.Errorf("echo: %q, %v", echo, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return "", true, err
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		return "", true, fmt.Errorf("after the half-close: %q, %v (want EOF)", rest, err)
	}
	return pod, true, nil
}

// waitGreet polls greetStream until it succeeds within d, and returns the pod.
func waitGreet(t *testing.T, addr string, d time.Duration, msg string) string {
	t.Helper()
	var pod string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		pod, _, err = greetStream(addr)
		require.NoError(c, err)
	}, d, tick, msg)
	return pod
}

// greetAll reaches addr connections times, the first within wait as
// waitGreet does, and returns the pods that answered.
func greetAll(t *testing.T, addr, msg string) []string {
	t.Helper()
	got := []string{waitGreet(t, addr, wait, msg)}
	for range connections - 1 {
		pod, _, err := greetStream(addr)
		require.NoError(t, err)
		got = append(got, pod)
	}
	return got
}

// expectReset connects to addr, where the egress must refuse what it
// cannot carry with a TCP reset: it fails t unless the connection is reset
// within limit with no byte of the target's. The reset may come before the
// dial returns (the egress accepts and resets in well under a millisecond),
// or on the first read. An EOF would pass for an empty answer, a refused
// dial (nothing listening) would not be the egress's doing, and a
// connection still open after limit is a hang. It returns how long the
// refusal took.
func expectReset(t *testing.T, addr string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, limit)
	if err == nil {
		defer conn.Close()
		_ = conn.SetReadDeadline(start.Add(limit))
		buf := make([]byte, 256)
		var n int
		n, err = conn.Read(buf)
		require.Zero(t, n, "no byte of the target may arrive; got %q", buf[:n])
	}
	elapsed := time.Since(start)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection hung for %v instead of failing fast", limit)
	require.ErrorIs(t, err, syscall.ECONNRESET, "the egress resets the client")
	return elapsed
}

// metric returns a gateway's metric (0 when it has no such sample yet).
func metric(t require.TestingT, g *harness.Gateway, name string, lbl map[string]string) float64 {
	return harness.MetricValue(t, g.MetricsURL+"/metrics", name, lbl)
}

// alive is a gateway's gateway_alive{cluster}, and whether it has the
// sample yet (it has once the first probe of that peer has ended).
func alive(t require.TestingT, g *harness.Gateway, cluster string) (float64, bool) {
	v, ok, err := g.Metric("coredns_mcmirror_gateway_alive", map[string]string{"cluster": cluster})
	require.NoError(t, err)
	return v, ok
}

package trust_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/test/harness"
)

// runPod starts an echo server as pod name of cluster c and waits until it
// answers at its own address.
func runPod(t *testing.T, c *harness.Cluster, name string) *harness.Pod {
	t.Helper()
	p := c.RunPod(t, name, harness.EchoServer(podPort))
	addr := net.JoinHostPort(p.IP.String(), strconv.Itoa(podPort))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got, err := greet(addr)
		require.NoError(ct, err)
		assert.Equal(ct, c.Name+"/"+name, got)
	}, wait, tick, "pod %s/%s answers at %s", c.Name, name, addr)
	return p
}

// exportService creates in west a selector-less Service ns/name, port http
// 80 → 8080, exported in gateway mode, and an EndpointSlice written by
// hand with the addresses given (pod names are their targetRefs). Both
// are deleted when t ends.
func exportService(t *testing.T, ns, name string, addrs map[string]string) {
	t.Helper()
	ctx := context.Background()
	west := env.Cluster("west")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: portName, Port: servicePort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(podPort),
		}}},
	}
	_, err := west.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = west.Client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	es := &discoveryv1.EndpointSlice{
		// Written by hand, it carries the Service's export label itself,
		// as a selector-less Service's slices must to be seen.
		ObjectMeta: metav1.ObjectMeta{Name: name + "-pods", Namespace: ns, Labels: remotetest.SliceLabels(svc.Labels, map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "e2e.mcmirror.dev",
		})},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(portName), Port: ptr(int32(podPort)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for pod, addr := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
		})
	}
	_, err = west.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = west.Client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), es.Name, metav1.DeleteOptions{})
	})
}

// waitMirror waits until cluster c holds the mirror Service ns/name with an
// egress port recorded for the Service port, and the controller's
// EndpointSlice with that port; it returns the mirror and the port.
func waitMirror(t *testing.T, c *harness.Cluster, ns, name string) (*corev1.Service, int) {
	t.Helper()
	var svc *corev1.Service
	var port int
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		svc, err = c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(ct, err)
		ports := labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])
		p, ok := ports[labels.EgressPortKey(servicePort, string(corev1.ProtocolTCP))]
		require.True(ct, ok, "%s: egress port of %d/TCP in %q", name, servicePort, svc.Annotations[labels.EgressPorts])
		port = int(p)
		es, err := c.Client.DiscoveryV1().EndpointSlices(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, labels.EndpointSliceManagedBy, es.Labels[discoveryv1.LabelManagedBy])
		require.Len(ct, es.Ports, 1)
		assert.Equal(ct, p, *es.Ports[0].Port)
	}, wait, tick, "%s: mirror %s/%s with an egress port and its EndpointSlice", c.Name, ns, name)
	return svc, port
}

// egressAddr is where a client reaches an egress port.
func egressAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// greet connects to addr, reads the echo server's greeting and returns the
// pod it names ("west/web-0"), after a line has been echoed both ways.
func greet(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	pod, err := hello(r)
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

// hello reads the echo server's greeting and returns the pod it names.
func hello(r *bufio.Reader) (string, error) {
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

// waitGreet polls greet until it succeeds within d, and returns the pod.
func waitGreet(t *testing.T, addr string, d time.Duration, msg string) string {
	t.Helper()
	var pod string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		pod, err = greet(addr)
		require.NoError(c, err)
	}, d, tick, msg)
	return pod
}

// refused connects to addr and reports whether the egress refused the
// connection (a reset, or EOF before any greeting) rather than carrying
// it to a pod.
func refused(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil // reset as it was set up, or nothing listens
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	var ne net.Error
	switch {
	case n > 0:
		return fmt.Errorf("read %d bytes of a target", n)
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("hung instead of being refused")
	}
	return nil
}

// metric reads one sample of a gateway's metrics; absent is 0.
func metric(t require.TestingT, g *harness.Gateway, name string, lbl map[string]string) float64 {
	v, _, err := g.Metric(name, lbl)
	require.NoError(t, err)
	return v
}

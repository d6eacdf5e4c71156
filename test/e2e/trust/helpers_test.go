package trust_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// exportService creates in cluster c a selector-less Service ns/name, port
// http 80 → 8080, exported in gateway mode, and an EndpointSlice written by
// hand with the address addr of pod (its targetRef). Both are deleted when
// t ends.
func exportService(t *testing.T, c *harness.Cluster, ns, name, pod, addr string) {
	t.Helper()
	c.CreateSelectorless(t, ns, name, harness.SelectorlessService{
		Labels: map[string]string{labels.Exported: labels.ExportGateway},
		Port:   servicePort, TargetPort: podPort, Endpoints: []harness.PodAddr{{Name: pod, IP: addr}}})
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
	return harness.MetricValue(t, g.MetricsURL+"/metrics", name, lbl)
}

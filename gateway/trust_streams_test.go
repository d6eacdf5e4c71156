package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// streamEndBound is the bound these tests hold the ingress to: a stream
// ends within one sweep of the informer's event, which is milliseconds;
// two seconds leave room for a loaded machine under -race, and are far
// below streamSweepInterval, so that the periodic sweep cannot be what
// ended it.
const streamEndBound = 2 * time.Second

// guardedPair is a pair whose ingress resolves through real Exports over a
// fake clientset holding web (exported, selector-less, opted in) and two
// EndpointSlices, web-a and web-b, each with one endpoint: an echo server
// on loopback, one port each. It returns the two targets.
func guardedPair(t *testing.T) (*pair, *fake.Clientset, [2]netip.AddrPort) {
	t.Helper()
	return guardedPairLabelled(t, map[string]string{labels.Exported: labels.ExportGateway})
}

// guardedPairLabelled is guardedPair with web's labels lbls, its client
// set up by setup before the informers start.
func guardedPairLabelled(t *testing.T, lbls map[string]string, setup ...func(*fake.Clientset)) (*pair, *fake.Clientset, [2]netip.AddrPort) {
	t.Helper()
	a, b := startEcho(t, "west a\n"), startEcho(t, "west b\n")
	svc := exportedService("web", "10.96.0.10", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
	svc.Labels = lbls
	esA := endpointSlice("web", "web-a", "http", int32(a.addr.Port()), ep{addr: "127.0.0.1", ready: new(true)})
	esB := endpointSlice("web", "web-b", "http", int32(b.addr.Port()), ep{addr: "127.0.0.1", ready: new(true)})
	client := remotetest.NewClientset(svc, esA, esB)
	for _, f := range setup {
		f(client)
	}
	exports := runExports(t, client, EndpointPolicy{Selectorless: []string{"default/web"}}.AllowLoopback())
	p := newPair(t, func(in *Ingress, _ *Egress) { in.Resolver = exports })
	return p, client, [2]netip.AddrPort{a.addr, b.addr}
}

// stream opens a stream through the ingress to web: it returns the stream
// and which of guardedPair's targets it reached (0 or 1), by its greeting.
func (p *pair) stream(t *testing.T) (*tls.Conn, *bufio.Reader, int) {
	t.Helper()
	c, br, line := p.tunnel(t, p.ingressAddr, "web.default:80")
	switch line {
	case "west a\n":
		return c, br, 0
	case "west b\n":
		return c, br, 1
	}
	t.Fatalf("greeting %q", line)
	return nil, nil, 0
}

// requireEnded waits for the ingress to end the stream c: EOF or a reset,
// within streamEndBound of since, and returns how long it took.
func requireEnded(t *testing.T, c net.Conn, since time.Time, what string) time.Duration {
	t.Helper()
	_ = c.SetReadDeadline(since.Add(streamEndBound))
	_, err := io.Copy(io.Discard, c)
	took := time.Since(since)
	if ne, ok := err.(net.Error); ok {
		require.False(t, ne.Timeout(), "%s: the stream is still open after %v", what, took)
	}
	t.Logf("%s: stream ended after %v (%v)", what, took, err)
	return took
}

// An established stream through a real ingress, on real sockets, is ended
// within the bound when its export is withdrawn (the label taken off), when
// its endpoint leaves the EndpointSlice, and when the Service is deleted;
// streams that are still allowed carry on, and each end is counted.
func TestWithdrawnExportEndsStreams(t *testing.T) {
	ctx := context.Background()

	t.Run("export withdrawn", func(t *testing.T) {
		p, client, _ := guardedPair(t)
		c, _, _ := p.stream(t)
		before := value(streamsEnded.WithLabelValues("east", streamNotExported))
		start := relabel(t, client, "web", labels.Exported, "")
		requireEnded(t, c, start, "export withdrawn")
		require.Eventually(t, func() bool { return value(streamsEnded.WithLabelValues("east", streamNotExported)) == before+1 }, time.Second, time.Millisecond)
		// And nothing new gets in.
		resp, _ := connect(t, dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil)), connectRequest("web.default:80"))
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("endpoint leaves", func(t *testing.T) {
		p, client, targets := guardedPair(t)
		// Streams until one reaches each endpoint.
		var gone, stays *tls.Conn
		var staysBR *bufio.Reader
		for gone == nil || stays == nil {
			c, br, target := p.stream(t)
			switch {
			case target == 0 && gone == nil:
				gone = c
			case target == 1 && stays == nil:
				stays, staysBR = c, br
			default:
				c.Close()
			}
		}
		before := value(streamsEnded.WithLabelValues("east", streamEndpointGone))
		es, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-a", metav1.GetOptions{})
		require.NoError(t, err)
		es.Endpoints = nil // web-a's endpoint leaves
		start := time.Now()
		_, err = client.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{})
		require.NoError(t, err)
		requireEnded(t, gone, start, "endpoint "+targets[0].String()+" left")
		require.Eventually(t, func() bool { return value(streamsEnded.WithLabelValues("east", streamEndpointGone)) == before+1 }, time.Second, time.Millisecond)
		requireOpen(t, stays, staysBR, "the stream to the endpoint that stays")
	})

	t.Run("endpoint not ready: the stream stays", func(t *testing.T) {
		// A pod that fails its readiness probe, or is terminating, keeps
		// its streams, as kube-proxy keeps its connections: only new
		// ones go elsewhere.
		p, client, _ := guardedPair(t)
		c, br, _ := p.stream(t)
		for _, name := range []string{"web-a", "web-b"} {
			es, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			for i := range es.Endpoints {
				es.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: new(false), Terminating: new(true)}
			}
			_, err = client.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		time.Sleep(300 * time.Millisecond) // the event and a sweep
		requireOpen(t, c, br, "a stream to an endpoint not ready")
	})

	t.Run("Service deleted", func(t *testing.T) {
		p, client, _ := guardedPair(t)
		c, _, _ := p.stream(t)
		start := time.Now()
		require.NoError(t, client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}))
		requireEnded(t, c, start, "Service deleted")
	})
}

// A stream whose peer's cluster leaves the allow-list is ended at the next
// check of every stream (Recheck, what a change of the allow-list calls);
// the others carry on.
func TestStreamsEndWhenClusterLeavesAllowList(t *testing.T) {
	p, _, targets := guardedPair(t)
	exports := p.ingress.Resolver.(*Exports)

	// Two streams registered as the ingress registers them, one allowed
	// by a switch the test turns off.
	var allowed atomic.Bool
	allowed.Store(true)
	c, br, i := p.stream(t)
	a, b := net.Pipe()
	defer b.Close()
	release := exports.Guard("north", Destination{Namespace: "default", Service: "web", Port: 80}, targets[i], allowed.Load, a)
	defer release()

	before := value(streamsEnded.WithLabelValues("north", streamClusterNotAllowed))
	allowed.Store(false)
	start := time.Now()
	exports.guard.Recheck()
	requireEnded(t, b, start, "cluster left the allow-list")
	require.Eventually(t, func() bool { return value(streamsEnded.WithLabelValues("north", streamClusterNotAllowed)) == before+1 }, time.Second, time.Millisecond)
	requireOpen(t, c, br, "a stream of a cluster still allowed")
}

// A stream registered after the change that withdrew it (the change came
// between the stream's resolution and its registration) is ended as it is
// registered, not at the next periodic sweep.
func TestStreamRegisteredAfterWithdrawal(t *testing.T) {
	p, client, _ := guardedPair(t)
	exports := p.ingress.Resolver.(*Exports)
	d := Destination{Namespace: "default", Service: "web", Port: 80}
	target, reason := exports.Resolve(d)
	require.Empty(t, reason)
	require.NoError(t, client.CoreV1().Services("default").Delete(context.Background(), "web", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, r := exports.Resolve(d); return r == ReasonNotExported }, 5*time.Second, time.Millisecond)

	a, b := net.Pipe()
	defer b.Close()
	start := time.Now()
	release := exports.Guard("east", d, target, nil, a)
	defer release()
	requireEnded(t, b, start, "registered after the withdrawal")
}

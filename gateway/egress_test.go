package gateway

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// roundTrip connects to the egress port, reads the echo server's greeting,
// and has a line echoed.
func roundTrip(t *testing.T, port int32, greeting string) {
	t.Helper()
	c := dialEgress(t, port)
	defer c.Close()
	readGreeting(t, c, greeting)
	_, err := io.WriteString(c, "ping\n")
	require.NoError(t, err)
	readGreeting(t, c, "ping\n")
}

// servedAgain reports whether a new client of the egress port is served:
// it reads greeting.
func servedAgain(port int32, greeting string) func() bool {
	return func() bool {
		c, err := net.Dial("tcp", egressAddr(port))
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(greeting))
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == greeting
	}
}

// A peer whose ingress is down: the client is reset at once, and the
// failed dial is counted.
func TestEgressPeerDownResets(t *testing.T) {
	down := egressAddr(freePort(t)) // nothing listens there
	p := newPair(t, func(_ *Ingress, eg *Egress) { eg.Peers = StaticPeers{"west": down} })
	port := p.mirror(t, "web", "", 80)

	dialErrs := value(dialErrorsTotal.WithLabelValues("west", DirectionEgress))
	requireDialResetCounted(t, egressAddr(port), "west", DirectionEgress, ReasonDialFailed)
	assert.Equal(t, dialErrs+1, value(dialErrorsTotal.WithLabelValues("west", DirectionEgress)))
}

// A peer whose ingress accepts TCP and then says nothing: the client is
// reset once DialTimeout has passed, not left hanging.
func TestEgressSilentPeerResets(t *testing.T) {
	ln := listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // held open, never answered
		}
	}()
	p := newPair(t, func(_ *Ingress, eg *Egress) {
		eg.Peers = StaticPeers{"west": ln.Addr().String()}
		eg.DialTimeout = 300 * time.Millisecond
	})
	port := p.mirror(t, "web", "", 80)

	failures := value(handshakeFailures.WithLabelValues(DirectionEgress))
	requireDialReset(t, egressAddr(port))
	(<-accepted).Close()
	assert.Equal(t, failures+1, value(handshakeFailures.WithLabelValues(DirectionEgress)))
}

// A peer that refuses the destination (403): the client is reset, the
// refusal counted on both sides, and the target sees nothing.
func TestEgressPeerRefusalResets(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "hi\n")
	port := p.mirror(t, "web", "", 80) // the resolver does not know web yet

	ingressBefore := refusals("east", DirectionIngress, ReasonNotExported)
	requireDialResetCounted(t, egressAddr(port), "west", DirectionEgress, ReasonPeerRefused)
	assert.Equal(t, ingressBefore+1, refusals("east", DirectionIngress, ReasonNotExported))

	p.resolver.set(web, echo.addr)
	roundTrip(t, port, "hi\n")
	assert.Equal(t, 1, echo.count())
}

// A mirror's cluster with no known ingress: reset, counted.
func TestEgressUnknownPeerResets(t *testing.T) {
	p := newPair(t)
	egressPort := freePort(t)
	svc := mirrorService("web-paris", "web", "", map[int32]int32{80: egressPort})
	svc.Labels[labels.ClusterName] = "paris"
	p.create(t, svc)
	p.waitListening(t, egressPort, true)

	requireDialResetCounted(t, egressAddr(egressPort), "paris", DirectionEgress, ReasonUnknownPeer)
}

// Ports added to a mirror's annotation are listened on, and removed ones
// closed, live; a per-pod mirror goes to its own pod.
func TestEgressFollowsMirrorPorts(t *testing.T) {
	p := newPair(t)
	echo80 := startEcho(t, "port 80\n")
	echo81 := startEcho(t, "port 81\n")
	pod := startEcho(t, "pod web-0\n")
	p.resolver.set(web, echo80.addr)
	p.resolver.set(Destination{Namespace: "default", Service: "web", Port: 81}, echo81.addr)
	p.resolver.set(Destination{Namespace: "default", Service: "web", Host: "web-0", Port: 80}, pod.addr)
	a := p.mirror(t, "web", "", 80)
	roundTrip(t, a, "port 80\n")
	podPort := p.mirror(t, "web", "web-0", 80)
	roundTrip(t, podPort, "pod web-0\n")
	requireValue(t, egressListeners, 2)

	services := p.client.CoreV1().Services("default")
	update := func(ports map[int32]int32) {
		t.Helper()
		svc, err := services.Get(context.Background(), "web-west", metav1.GetOptions{})
		require.NoError(t, err)
		svc.Annotations = mirrorService("web-west", "web", "", ports).Annotations
		_, err = services.Update(context.Background(), svc, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	b := freePort(t)
	update(map[int32]int32{80: a, 81: b})
	p.waitListening(t, b, true)
	roundTrip(t, b, "port 81\n")
	roundTrip(t, a, "port 80\n")
	requireValue(t, egressListeners, 3)

	update(map[int32]int32{81: b})
	p.waitListening(t, a, false)
	requireRefused(t, a)
	roundTrip(t, b, "port 81\n")
	requireValue(t, egressListeners, 2)

	require.NoError(t, services.Delete(context.Background(), "web-west", metav1.DeleteOptions{}))
	p.waitListening(t, b, false)
	requireRefused(t, b)
	roundTrip(t, podPort, "pod web-0\n")
	requireValue(t, egressListeners, 1)
}

// An egress port recorded by two mirrors is served to the first claim (here
// the older mirror; routes.go), never dropped, and the conflict is shown
// in egress_port_conflicts until one mirror lets it go.
func TestEgressPortConflict(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "web\n")
	port := p.serveWeb(t, echo.addr)
	roundTrip(t, port, "web\n")
	requireValue(t, egressConflicts, 0)

	services := p.client.CoreV1().Services("default")
	later := mirrorService("api-west", "api", "", map[int32]int32{8080: port})
	later.CreationTimestamp = metav1.NewTime(time.Now().Add(time.Minute))
	_, err := services.Create(context.Background(), later, metav1.CreateOptions{})
	require.NoError(t, err)
	requireValue(t, egressConflicts, 1)
	roundTrip(t, port, "web\n")

	require.NoError(t, services.Delete(context.Background(), "api-west", metav1.DeleteOptions{}))
	requireValue(t, egressConflicts, 0)
	roundTrip(t, port, "web\n")
}

// switchPeers is a Peers whose addresses a test changes.
type switchPeers struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (s *switchPeers) IngressAddress(cluster string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.addrs[cluster]
	return a, ok
}

func (s *switchPeers) set(cluster, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs[cluster] = addr
}

// The egress checks that the ingress it reached is the route's cluster's:
// an ingress whose certificate names another cluster is refused (a
// handshake failure, the client reset) and is given no destination.
func TestEgressChecksPeerIdentity(t *testing.T) {
	peers := &switchPeers{addrs: map[string]string{}}
	p := newPair(t, func(_ *Ingress, eg *Egress) { eg.Peers = peers })
	echo := startEcho(t, "hi\n")
	p.resolver.set(web, echo.addr)

	// An ingress of cluster paris, from the same root, that would carry
	// web to the same target.
	paris := &Ingress{Certs: p.certs(t, "paris", gatewaytest.Options{}), Resolver: p.resolver}
	peers.set("west", serveIngress(t, paris))
	port := p.mirror(t, "web", "", 80)

	failures := value(handshakeFailures.WithLabelValues(DirectionEgress))
	requireDialResetCounted(t, egressAddr(port), "west", DirectionEgress, ReasonHandshake)
	assert.Equal(t, failures+1, value(handshakeFailures.WithLabelValues(DirectionEgress)))

	peers.set("west", p.ingressAddr)
	roundTrip(t, port, "hi\n")
	assert.Equal(t, 1, echo.count(), "the target was reached through the wrong cluster's ingress")
}

// With MaxConns streams open, one more client is reset at once and
// counted; once a stream ends, a new client is served.
func TestEgressMaxConns(t *testing.T) {
	p := newPair(t, func(_ *Ingress, eg *Egress) { eg.MaxConns = 2 })
	echo := startEcho(t, "hi\n")
	port := p.serveWeb(t, echo.addr)

	first := dialEgress(t, port)
	readGreeting(t, first, "hi\n")
	second := dialEgress(t, port)
	readGreeting(t, second, "hi\n")

	requireDialResetCounted(t, egressAddr(port), "", DirectionEgress, ReasonTooMany)
	assert.Equal(t, 2, echo.count())

	first.Close()
	require.Eventually(t, servedAgain(port, "hi\n"), 10*time.Second, 20*time.Millisecond,
		"no new stream after one ended")
	assert.Equal(t, 3, echo.count(), "a reset client reached the target")
	// The second stream was never disturbed.
	_, err := io.WriteString(second, "still\n")
	require.NoError(t, err)
	readGreeting(t, second, "still\n")
}

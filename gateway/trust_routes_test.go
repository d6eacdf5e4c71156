package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A real egress, on real sockets, keeps carrying a real mirror's port to
// the real mirror's destination while others claim it: a Service labelled
// as a mirror by anyone who may write Services, made after the mirror; an
// older Service relabelled to claim the port; and a Service held by a
// finalizer while being deleted, whose annotation claims the port and
// another. Each is seen (the conflict gauge, the ignored-claims gauge), and
// the port stays open throughout.
func TestEgressKeepsMirrorPortAgainstForgedClaims(t *testing.T) {
	p := newPair(t)
	shop := startEcho(t, "shop/web\n")
	tenant := startEcho(t, "tenant/evil\n")
	p.resolver.set(Destination{Namespace: "shop", Service: "web", Port: 80}, shop.addr)
	p.resolver.set(Destination{Namespace: "tenant", Service: "evil", Port: 80}, tenant.addr)
	ctx := context.Background()

	port, other := freePort(t), freePort(t)
	real := made(mirrorService("web-west", "web", "", map[int32]int32{80: port}), "shop", 0)
	p.create(t, real)
	_, err := p.client.DiscoveryV1().EndpointSlices("shop").Create(ctx, controllerSlice(real), metav1.CreateOptions{})
	require.NoError(t, err)
	p.waitListening(t, port, true)
	roundTrip(t, port, "shop/web\n")
	requireValue(t, egressConflicts, 0)

	// A forged mirror in another namespace, made later; then an older
	// Service, relabelled as a mirror: the real mirror has the
	// controller's EndpointSlice, it keeps the port.
	for _, after := range []time.Duration{time.Minute, -time.Hour} {
		p.create(t, made(mirrorService("evil-west", "evil", "", map[int32]int32{80: port}), "tenant", after))
		requireValue(t, egressConflicts, 1) // seen
		require.True(t, p.listening(port), "the real mirror's port is still served")
		roundTrip(t, port, "shop/web\n")
		require.NoError(t, p.client.CoreV1().Services("tenant").Delete(ctx, "evil-west", metav1.DeleteOptions{}))
		requireValue(t, egressConflicts, 0)
	}

	// A Service being deleted, held by a finalizer, claiming the port and
	// another: ignored, both ports.
	hog := deleting(made(mirrorService("hog-west", "hog", "", map[int32]int32{80: port, 81: other}), "tenant", time.Minute))
	p.create(t, hog)
	requireValue(t, egressClaimsIgnored.WithLabelValues(ignoredDeleting), 2)
	requireValue(t, egressConflicts, 0)
	require.True(t, p.listening(port))
	roundTrip(t, port, "shop/web\n")
	p.waitListening(t, other, false)
}

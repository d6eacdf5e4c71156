package gateway

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingListener is a real listener whose Accept fails with err, without
// taking a connection, the first fails times; then it accepts.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
	err   error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// emfile is the error Accept returns when the process is out of file
// descriptors.
var emfile = &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}

// failFirstListener has the first listener of eg fail its first fails
// accepts with err; the next listeners work.
func failFirstListener(eg *Egress, fails int, err error) {
	var once sync.Once
	eg.ListenFunc = func(network, addr string) (net.Listener, error) {
		ln, lerr := net.Listen(network, addr)
		if lerr == nil {
			once.Do(func() { ln = &failingListener{Listener: ln, fails: fails, err: err} })
		}
		return ln, lerr
	}
}

// An egress port whose Accept fails for a while (the process out of file
// descriptors) goes on accepting once it can: a client that connects then
// is carried, not left in the backlog of a listener nobody accepts on. The
// failures are counted, and the egress stays ready.
func TestEgressAcceptRetriesTemporaryErrors(t *testing.T) {
	const fails = 4
	p := newPair(t, func(_ *Ingress, eg *Egress) { failFirstListener(eg, fails, emfile) })
	before := value(acceptErrors.WithLabelValues(DirectionEgress))
	port := p.serveWeb(t, startEcho(t, "hi\n").addr)
	roundTrip(t, port, "hi\n")
	assert.Equal(t, before+fails, value(acceptErrors.WithLabelValues(DirectionEgress)))
	assert.True(t, p.egress.Ready())
}

// An egress port whose Accept fails for good is closed, so that clients
// are refused rather than left hanging; the egress is not ready while it
// is, and listens on the port again by itself.
func TestEgressAcceptFatalErrorIsNotSilent(t *testing.T) {
	p := newPair(t, func(_ *Ingress, eg *Egress) { failFirstListener(eg, 1, errors.New("accept: the listener broke")) })
	echo := startEcho(t, "hi\n")
	p.resolver.set(web, echo.addr)
	egressPort := freePort(t)
	p.create(t, mirrorService("web-west", "web", "", map[int32]int32{80: egressPort}))

	require.Eventually(t, func() bool { return !p.egress.Ready() }, 5*time.Second, time.Millisecond,
		"the egress stays ready with a port whose accept loop has ended")
	// Listened on again within a second or so: ready, and carrying.
	require.Eventually(t, p.egress.Ready, 10*time.Second, 10*time.Millisecond, "the port is not listened on again")
	p.waitListening(t, egressPort, true)
	roundTrip(t, egressPort, "hi\n")
}

// The ingress's Accept failing for a while does not end Serve: a client
// that connects afterwards is served, and the failures are counted.
func TestIngressAcceptRetriesTemporaryErrors(t *testing.T) {
	p := newPair(t)
	target := startEcho(t, "hi\n")
	p.resolver.set(web, target.addr)
	ln := listen(t)
	const fails = 5
	in := &Ingress{Certs: p.west, Resolver: p.resolver, HandshakeTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		<-served
	})
	before := value(acceptErrors.WithLabelValues(DirectionIngress))
	go func() { served <- in.Serve(ctx, &failingListener{Listener: ln, fails: fails, err: emfile}) }()

	_, _, line := p.tunnel(t, ln.Addr().String(), web.String())
	assert.Equal(t, "hi\n", line)
	assert.Equal(t, 1, target.count())
	assert.Equal(t, before+fails, value(acceptErrors.WithLabelValues(DirectionIngress)))
	assert.True(t, in.Accepting())
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
}

// An Accept that fails for good ends Serve with the error, closes the
// listener (clients are refused, not left hanging) and says so: the
// ingress is no longer accepting, which /readyz tells.
func TestIngressAcceptFatalError(t *testing.T) {
	p := newPair(t)
	ln := listen(t)
	in := &Ingress{Certs: p.west, Resolver: p.resolver}
	broke := errors.New("accept: the listener broke")
	err := in.Serve(context.Background(), &failingListener{Listener: ln, fails: 1, err: broke})
	require.ErrorIs(t, err, broke)
	assert.False(t, in.Accepting())
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "want connection refused, got %v", err)
}

func TestTemporaryAcceptError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{emfile, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENOBUFS)}, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EPROTO)}, true},
		{&net.OpError{Op: "accept", Err: os.ErrDeadlineExceeded}, true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EBADF)}, false},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EINVAL)}, false},
		{errors.New("something else"), false},
	} {
		assert.Equal(t, tc.want, temporaryAcceptError(tc.err), "%v", tc.err)
	}
}

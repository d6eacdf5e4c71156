package mcmirror

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/stretchr/testify/require"

	"github.com/miekg/dns"
)

// wireServer is a CoreDNS server, the core/dnsserver one coredns-mc runs,
// with mcmirror over the fixture in front of fromNext, on real UDP and TCP
// sockets of 127.0.0.1: whole packets go through the server's own parsing,
// accept rules and scrubbing, as in production.
type wireServer struct {
	udp, tcp string
	// inflight counts plugin chain calls that have not returned: a
	// handler that hangs shows here even when no reply was expected.
	inflight atomic.Int32
	// panicked holds the first panic of the chain with its stack; the
	// server recovers it (it must keep serving), the test must not.
	panicked atomic.Pointer[string]
}

// guard wraps the plugin chain: it counts calls in flight and records
// panics before passing them on to the server's own recovery.
type guard struct {
	next plugin.Handler
	s    *wireServer
}

func (g guard) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	g.s.inflight.Add(1)
	defer g.s.inflight.Add(-1)
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprintf("%v\n%s", v, debug.Stack())
			g.s.panicked.CompareAndSwap(nil, &msg)
			panic(v)
		}
	}()
	return g.next.ServeDNS(ctx, w, r)
}

func (g guard) Name() string { return "guard" }

// startWireServer serves m on fresh sockets until the test ends.
func startWireServer(tb testing.TB, m *MCMirror) *wireServer {
	tb.Helper()
	s := &wireServer{}
	cfg := &dnsserver.Config{Zone: ".", Transport: "dns", ListenHosts: []string{"127.0.0.1"}, Port: "0"}
	cfg.AddPlugin(func(plugin.Handler) plugin.Handler { return guard{next: m, s: s} })
	srv, err := dnsserver.NewServer("127.0.0.1:0", []*dnsserver.Config{cfg})
	require.NoError(tb, err)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(tb, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	go func() { _ = srv.ServePacket(pc) }()
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Stop(); pc.Close(); ln.Close() })
	s.udp, s.tcp = pc.LocalAddr().String(), ln.Addr().String()
	return s
}

// newWireFixture is the fixture's plugin behind a wire server.
func newWireFixture(tb testing.TB) (*MCMirror, *wireServer) {
	m := newTestPlugin(tb, indextest.Fixture(), 5, fall.F{})
	return m, startWireServer(tb, m)
}

// replyWait bounds the wait for a reply the server must send: far above
// any answer's time, so that only a hang reaches it.
const replyWait = 5 * time.Second

// exchangeUDP sends pkt as one datagram. With want, it waits for the reply
// and returns it; otherwise it returns nil at once.
func (s *wireServer) exchangeUDP(pkt []byte, want bool) ([]byte, error) {
	c, err := net.Dial("udp", s.udp)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(pkt); err != nil {
		return nil, err
	}
	if !want {
		return nil, nil
	}
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(replyWait))
	n, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("no UDP reply: %w", err)
	}
	return buf[:n], nil
}

// exchangeTCP sends pkt with its length prefix on a new connection, as
// exchangeUDP.
func (s *wireServer) exchangeTCP(pkt []byte, want bool) ([]byte, error) {
	c, err := net.Dial("tcp", s.tcp)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	frame := binary.BigEndian.AppendUint16(nil, uint16(len(pkt)))
	if _, err := c.Write(append(frame, pkt...)); err != nil {
		return nil, err
	}
	if !want {
		return nil, nil
	}
	_ = c.SetReadDeadline(time.Now().Add(replyWait))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, fmt.Errorf("no TCP reply: %w", err)
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, fmt.Errorf("short TCP reply: %w", err)
	}
	return buf, nil
}

// answered expects the server to answer pkt: a message whose header it can
// read (12 octets) and that is not itself a response. miekg/dns drops
// anything else without a word, so as not to be an amplifier.
func answered(pkt []byte) bool { return len(pkt) >= 12 && pkt[2]&0x80 == 0 }

// probeName is a good query's name and probeAddr its answer in the fixture.
const (
	probeName = "nginx-set-0.nginx-svc-west.default.svc.cluster.local."
	probeAddr = "10.96.0.10"
)

// healthy checks the server still answers a good query right, and that no
// call of the plugin chain is stuck or panicked.
func (s *wireServer) healthy(t testing.TB) {
	t.Helper()
	q := new(dns.Msg).SetQuestion(probeName, dns.TypeA)
	pkt, _ := q.Pack()
	raw, err := s.exchangeUDP(pkt, true)
	require.NoError(t, err, "server no longer answers")
	r := new(dns.Msg)
	require.NoError(t, r.Unpack(raw), "good query: reply does not parse")
	require.False(t, len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != probeAddr, "good query answered wrong: %v", r)
	deadline := time.Now().Add(replyWait)
	for s.inflight.Load() != 0 {
		require.False(t, time.Now().After(deadline), "%d calls of the plugin chain have not returned", s.inflight.Load())
		time.Sleep(time.Millisecond)
	}
	if p := s.panicked.Load(); p != nil {
		t.Fatalf("the plugin chain panicked: %s", *p)
	}
}

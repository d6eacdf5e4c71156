package gateway

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// pair is an egress of cluster east and an ingress of cluster west on
// loopback, with real TLS material, a fake resolver on the ingress side and
// a fake clientset holding east's mirror Services.
type pair struct {
	ca          *gatewaytest.CA
	dir         string
	east, west  *Certs
	ingress     *Ingress
	ingressAddr string
	resolver    *fakeResolver
	egress      *Egress
	client      *fake.Clientset
}

// fakeResolver maps destinations to targets.
type fakeResolver struct {
	mu      sync.Mutex
	targets map[Destination]netip.AddrPort
	refuse  map[Destination]Reason
}

func (r *fakeResolver) Resolve(d Destination) (netip.AddrPort, Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if why, ok := r.refuse[d]; ok {
		return netip.AddrPort{}, why
	}
	if t, ok := r.targets[d]; ok {
		return t, ""
	}
	return netip.AddrPort{}, ReasonNotExported
}

func (r *fakeResolver) HasSynced() bool { return true }

func (r *fakeResolver) set(d Destination, t netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets[d] = t
}

func newPair(t *testing.T) *pair {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &pair{dir: t.TempDir(), resolver: &fakeResolver{targets: map[Destination]netip.AddrPort{}, refuse: map[Destination]Reason{}}}
	var err error
	p.ca, err = gatewaytest.NewCA("test root")
	require.NoError(t, err)
	p.east = p.certs(t, "east", gatewaytest.Options{})
	p.west = p.certs(t, "west", gatewaytest.Options{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.ingressAddr = ln.Addr().String()
	p.ingress = &Ingress{Certs: p.west, Resolver: p.resolver, HandshakeTimeout: 2 * time.Second}
	go func() { _ = p.ingress.Serve(ctx, ln) }()

	p.client = fake.NewClientset()
	p.egress = &Egress{Certs: p.east, Peers: StaticPeers{"west": p.ingressAddr}, BindAddress: "127.0.0.1", DialTimeout: 2 * time.Second}
	go func() { _ = p.egress.Run(ctx, p.client) }()
	require.Eventually(t, p.egress.Ready, 5*time.Second, 10*time.Millisecond)
	return p
}

func (p *pair) certs(t *testing.T, cluster string, o gatewaytest.Options) *Certs {
	t.Helper()
	files, err := p.ca.IssueFiles(p.dir, cluster, o)
	require.NoError(t, err)
	c, err := LoadCerts(CertFiles{Cert: files.Cert, Key: files.Key, CA: files.CA})
	require.NoError(t, err)
	return c
}

// mirror records a mirror Service of west's Service svc (per-pod when host
// is set) whose port 80 is served on a free egress port, and returns that
// port once the egress listens on it.
func (p *pair) mirror(t *testing.T, svc, host string, port int32) int32 {
	t.Helper()
	egressPort := freePort(t)
	name := svc + "-west"
	l := map[string]string{
		labels.MirroredService: labels.MirroredServiceValue, labels.ClusterName: "west",
		labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: svc,
	}
	if host != "" {
		name = host + "-west"
		l[labels.RemoteHostname] = host
	}
	_, err := p.client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l,
			Annotations: map[string]string{labels.EgressPorts: labels.FormatEgressPorts(map[string]int32{labels.EgressPortKey(port, "TCP"): egressPort})}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(egressPort))))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "egress never listened on %d", egressPort)
	return egressPort
}

func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// echoServer answers every connection with greeting, then echoes; it half-
// closes its side when the client does. It counts connections.
type echoServer struct {
	addr  netip.AddrPort
	mu    sync.Mutex
	conns int
}

func startEcho(t *testing.T, greeting string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := &echoServer{addr: netip.MustParseAddrPort(ln.Addr().String())}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				if greeting != "" {
					_, _ = io.WriteString(c, greeting)
				}
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return s
}

func (s *echoServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func dialEgress(t *testing.T, port int32) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

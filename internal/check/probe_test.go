package check

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// serveEach hands each connection ln accepts to handle, until ln is closed.
func serveEach(ln net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
}

// A gateway's ingress asks for a client certificate, which check does not
// have: the server's chain arrives first all the same.
func TestDialPeerReadsTheServersChain(t *testing.T) {
	p := newPKI(t)
	chain := p.chain("west", now.Add(30*24*time.Hour))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{chain[0].Raw, chain[1].Raw}, PrivateKey: p.leafKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})
	require.NoError(t, err)
	defer ln.Close()
	serveEach(ln, func(c net.Conn) { _ = c.(*tls.Conn).Handshake(); c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := DialPeer(ctx, ln.Addr().String())
	require.Empty(t, d.Err)
	require.Len(t, d.Chain, 2)
	assert.Equal(t, chain[0].Raw, d.Chain[0].Raw)
	_, err = VerifyChain(d.Chain, p.pool, "", now)
	assert.NoError(t, err)

	// Nothing listens: an answer (refused), not silence.
	addr := ln.Addr().String()
	ln.Close()
	d = DialPeer(ctx, addr)
	assert.NotEmpty(t, d.Err)
	assert.True(t, d.Answered, d.Err)

	// Something listens but never speaks TLS: silence until the timeout.
	quiet, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer quiet.Close()
	serveEach(quiet, func(c net.Conn) { <-t.Context().Done(); c.Close() })
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	d = DialPeer(short, quiet.Addr().String())
	assert.False(t, d.Answered, d.Err)
	assert.Contains(t, d.Err, "no answer within the timeout")
}

// check asks the DNS server it is given, over UDP, and reads the addresses
// of the answer.
func TestAskDNS(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "web-west.default.svc.cluster.local." {
			rr, _ := dns.NewRR("web-west.default.svc.cluster.local. 5 IN A 10.96.0.20")
			m.Answer = append(m.Answer, rr)
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	defer srv.Shutdown()

	c := &collector{o: Options{DNSServer: pc.LocalAddr().String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := DNSFacts{Query: DNSQuery{Name: "web-west.default.svc.cluster.local.", Want: netip.MustParseAddr("10.96.0.20")}, HasQuery: true}
	c.askDNS(ctx, &f)
	assert.Equal(t, "NOERROR", f.Rcode)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.96.0.20")}, f.Answer)
	assert.Equal(t, OK, evalDNS(f).Status, evalDNS(f).Message)

	f = DNSFacts{Query: DNSQuery{Name: "gone-west.default.svc.cluster.local."}, HasQuery: true}
	c.askDNS(ctx, &f)
	assert.Equal(t, "NXDOMAIN", f.Rcode)
	assert.Equal(t, Fail, evalDNS(f).Status)
}

// What the API server's proxy says when no gateway serves, told from what
// the gateway itself answers: the API server's own errors come as a
// Status.
func TestProxyErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	status := func(err *apierrors.StatusError) []byte {
		st := err.ErrStatus
		st.Kind, st.APIVersion = "Status", "v1" // as the API server writes it
		b, jerr := json.Marshal(st)
		require.NoError(t, jerr)
		return b
	}
	noEndpoints := apierrors.NewServiceUnavailable(`no endpoints available for service "mcmirror-gateway-metrics"`)
	refused := apierrors.NewServiceUnavailable("error trying to reach service: dial tcp 10.0.0.5:9155: connect: connection refused")
	timeout := apierrors.NewServiceUnavailable("error trying to reach service: dial tcp 10.0.0.5:9155: i/o timeout")
	forbidden := apierrors.NewForbidden(gr, "http:mcmirror-gateway-metrics:metrics", nil)
	gatewaySaid := apierrors.NewGenericServerResponse(503, "get", gr, "http:mcmirror-gateway-metrics:metrics", "shutting down", 0, true)

	for _, c := range []struct {
		name          string
		body          []byte
		err           error
		own, unserved bool
	}{
		{"no endpoints", status(noEndpoints), noEndpoints, true, true},
		{"refused, as client-go returns it", status(refused), apierrors.NewGenericServerResponse(503, "get", gr, "x", "", 0, true), true, true},
		{"timeout", status(timeout), timeout, true, false},
		{"forbidden", status(forbidden), forbidden, true, false},
		{"no API server", nil, errors.New("dial tcp: connection refused"), true, true},
		{"the gateway's 503", []byte("shutting down\n"), gatewaySaid, false, false},
	} {
		msg, own := apiServerError(c.body, c.err)
		assert.Equal(t, c.own, own, c.name)
		assert.Equal(t, c.unserved, own && unserved(msg), "%s: %s", c.name, msg)
	}
}

func TestGaugeValue(t *testing.T) {
	body := []byte(`# HELP coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds Unix time at which the gateway's certificate expires.
# TYPE coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds gauge
coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds 1.7958816e+09
coredns_mcmirror_gateway_certificate_reloads_total{result="success"} 0
`)
	v, ok := gaugeValue(body, "coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds")
	require.True(t, ok)
	assert.Equal(t, 1.7958816e+09, v)
	_, ok = gaugeValue(body, "coredns_mcmirror_gateway_certificate")
	assert.False(t, ok)
}

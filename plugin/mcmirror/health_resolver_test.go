package mcmirror

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A gateway_health URL that names a Service in the plugin's zone is looked
// up through this server itself; an address, or a name outside the zone,
// through the system's resolver.
func TestHealthResolver(t *testing.T) {
	cfg := &config{zones: []string{"cluster.local.", "in-addr.arpa."}}
	for _, c := range []struct{ url, listen, want string }{
		{"http://mcmirror-gateway-metrics.mcmirror.svc.cluster.local:9155/peers", "", "127.0.0.1:53"},
		{"http://mcmirror-gateway-metrics.mcmirror.svc.cluster.local:9155/peers", "10.0.0.10", "10.0.0.10:53"},
		{"http://mcmirror-gateway-metrics.mcmirror.svc.cluster.local:9155/peers", "0.0.0.0", "127.0.0.1:53"},
		{"http://10.96.0.20:9155/peers", "", ""},
		{"http://[fd00::20]:9155/peers", "", ""},
		{"https://gateway.example.com/peers", "", ""},
	} {
		cfg.healthURL = c.url
		got := healthResolver(cfg, &dnsserver.Config{Port: "53", ListenHosts: []string{c.listen}})
		assert.Equal(t, c.want, got, "%s on %q", c.url, c.listen)
	}
	cfg.healthURL = ""
	assert.Empty(t, healthResolver(cfg, &dnsserver.Config{Port: "53"}))
}

// healthClient with a resolver reaches a host name only that resolver
// knows; the system's resolver does not know it (the name the test uses
// is in a zone no real resolver serves), so the first request proves the
// resolver was asked.
func TestHealthClientResolvesThroughServer(t *testing.T) {
	peers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `[{"cluster":"west","alive":true}]`)
	}))
	defer peers.Close()
	_, port, err := net.SplitHostPort(peers.Listener.Addr().String())
	require.NoError(t, err)

	const name = "mcmirror-gateway-metrics.mcmirror.svc.cluster.local."
	asked := make(chan string, 16)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		asked <- q.Name
		if q.Name == name && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(127, 0, 0, 1)})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	defer srv.Shutdown()

	url := "http://" + net.JoinHostPort("mcmirror-gateway-metrics.mcmirror.svc.cluster.local", port) + "/peers"
	resp, err := healthClient(pc.LocalAddr().String()).Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, `[{"cluster":"west","alive":true}]`, string(body))
	assert.Equal(t, name, <-asked)

	_, err = healthClient("").Get(url)
	assert.Error(t, err, "the system's resolver knows the name: the test proves nothing")
}

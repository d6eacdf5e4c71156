package harness

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// upstreamDNS is the resolver the real nodes name in their resolv.conf, on
// the host's address of the node network, port 53: what a cluster DNS
// forwards names outside the cluster domain to. This machine has no other
// network, so it answers NXDOMAIN for every name, at once: CoreDNS's
// forward and loop plugins get a resolver that answers, as on a real
// network, and no query goes anywhere else.
type upstreamDNS struct {
	servers []*dns.Server
}

func startUpstreamDNS(host netip.Addr) (*upstreamDNS, error) {
	addr := net.JoinHostPort(host.String(), strconv.Itoa(53))
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeNameError)
		_ = w.WriteMsg(m)
	})
	u := &upstreamDNS{}
	for _, network := range []string{"udp", "tcp"} {
		var wg sync.WaitGroup
		wg.Add(1)
		s := &dns.Server{Addr: addr, Net: network, Handler: h, NotifyStartedFunc: wg.Done}
		errc := make(chan error, 1)
		go func() { errc <- s.ListenAndServe() }()
		started := make(chan struct{})
		go func() { wg.Wait(); close(started) }()
		select {
		case <-started:
		case err := <-errc:
			u.stop()
			return nil, fmt.Errorf("upstream DNS on %s/%s: %w", addr, network, err)
		case <-time.After(10 * time.Second):
			u.stop()
			return nil, fmt.Errorf("upstream DNS on %s/%s: not started", addr, network)
		}
		u.servers = append(u.servers, s)
	}
	return u, nil
}

func (u *upstreamDNS) stop() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
}

// Command dnsref is the ceiling of the throughput comparison: a bare
// miekg/dns server that answers from a map built once from a zone file (the
// same file CoreDNS's file plugin serves), with no plugin chain, no
// metrics and no locking. A names and their A records answer NOERROR; any
// other name answers NXDOMAIN with the zone's SOA.
//
//	dnsref -zone FILE -origin cluster.local. -addr 127.0.0.1:5353
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/miekg/dns"
)

func main() {
	zoneFile := flag.String("zone", "", "zone file")
	origin := flag.String("origin", "cluster.local.", "zone origin")
	addr := flag.String("addr", "127.0.0.1:5353", "UDP and TCP listen address")
	flag.Parse()

	f, err := os.Open(*zoneFile)
	if err != nil {
		log.Fatal(err)
	}
	answers := map[string][]dns.RR{}
	var soa []dns.RR
	zp := dns.NewZoneParser(f, dns.Fqdn(*origin), *zoneFile)
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		switch rr.Header().Rrtype {
		case dns.TypeSOA:
			soa = []dns.RR{rr}
		case dns.TypeA:
			name := strings.ToLower(rr.Header().Name)
			answers[name] = append(answers[name], rr)
		}
	}
	if err := zp.Err(); err != nil {
		log.Fatal(err)
	}
	f.Close()

	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative, m.Compress = true, true
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
			if rrs, ok := answers[strings.ToLower(r.Question[0].Name)]; ok {
				m.Answer = rrs
				_ = w.WriteMsg(m)
				return
			}
		}
		m.Rcode = dns.RcodeNameError
		m.Ns = soa
		_ = w.WriteMsg(m)
	})
	errc := make(chan error, 2)
	for _, net := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: *addr, Net: net, Handler: h}
		go func() { errc <- srv.ListenAndServe() }()
	}
	fmt.Printf("dnsref: %d names on %s\n", len(answers), *addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		log.Fatal(err)
	case <-sig:
	}
}

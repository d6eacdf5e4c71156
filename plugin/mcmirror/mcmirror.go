// Package mcmirror is a CoreDNS plugin that answers multi-cluster Service
// names from watched Kubernetes clusters:
//
//	<svc>-<cluster>.<ns>.svc.<zone>          a Service exported by a linked cluster
//	<host>.<svc>-<cluster>.<ns>.svc.<zone>   one pod of a headless one
//	<svc>-global.<ns>.svc.<zone>             every cluster exporting <svc>
//	<svc>-federated.<ns>.svc.<zone>          a Linkerd federated Service (index/federated.go)
//	_<port>._<proto>.<any of those>          SRV, with glue
//
// and PTR for the mirror ClusterIPs; in the clusterset zones, the names of
// the Multi-Cluster Services DNS specification (serve_clusterset.go). See
// README.md.
//
// The plugin is three packages, each importing only those below it:
// mcmirror, the handler (setup, ServeDNS, the records made of what the
// index holds, gateway_health); watch, the informer layer (the clusters'
// watches, their health, relists), which feeds the index and is its
// Source; index, the names and what they answer, pure data; and object,
// the trimmed objects and the group keys all three share.
package mcmirror

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnsutil"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/request"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch"

	"github.com/miekg/dns"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// MCMirror is the mcmirror plugin.
type MCMirror struct {
	Next plugin.Handler
	// Zones are the zones answered, forward and reverse, lowercased.
	Zones []string
	Fall  fall.F
	// clusterset marks the clusterset zones of Zones.
	clusterset []bool

	// src tells whether the watches have synced; it is the watcher,
	// or a fake in tests.
	src index.Source
	// index is what the answers are made of, built from src.
	index *index.Index
	// ttl is the TTL of every record.
	ttl uint32
	// watch is the informer layer; nil when src is a fake.
	watch *watch.Watcher
	// soa is the SOA record of each zone, for the authority section of
	// NXDOMAIN and NODATA answers.
	soa [][]dns.RR
	// startupTimeout bounds how long Start waits for the watches.
	startupTimeout time.Duration
	// health polls the gateway's peer states; nil without gateway_health.
	health *gatewayHealth
	// requeue has a group rebuilt: through the watcher's queue, or at
	// once over a fake source.
	requeue func(object.GroupKey)
}

// Options are the settings of an MCMirror.
type Options struct {
	// Zones are the zones to answer in; the first forward zone that is
	// not a clusterset zone names the targets of PTR records. Reverse
	// zones enable PTR answers.
	Zones []string
	// ClusterSet are the zones of Zones that answer the names of the
	// Multi-Cluster Services DNS specification, such as clusterset.local,
	// instead of mcmirror's; the local derived Services are watched then.
	ClusterSet []string
	// Cluster is this cluster's name.
	Cluster string
	// Import is import mode (source import): only the local cluster is
	// watched, and the linked clusters are read from the mirrors the
	// controller writes there (watch.Options.Import).
	Import bool
	// TTL of every record; 0 is a valid TTL.
	TTL uint32
	// StartupTimeout is how long a link that cannot sync holds up
	// readiness and Start. Zero means the default, 5s.
	StartupTimeout time.Duration
	// StaleMaxAge is how long the last known state of a linked cluster
	// whose watches fail is answered (stale_max_age); 0 is forever.
	StaleMaxAge time.Duration
	// ExportSelector selects exported Services; nil means
	// labels.DefaultExportSelector.
	ExportSelector k8slabels.Selector
	// Fall is the fallthrough configuration.
	Fall fall.F
	// GatewayHealthURL, when set, is the gateway's peer states (GET
	// /peers), read every GatewayHealthInterval (zero means 2s).
	GatewayHealthURL      string
	GatewayHealthInterval time.Duration
	// GatewayHealthResolver, when set, is the DNS server (host:port) that
	// resolves the URL's host: this server itself, for a Service name in
	// its zone, since the DNS pods resolve with their node's resolver,
	// which knows no Service names. Empty: the system's resolver.
	GatewayHealthResolver string
	// AllowedCIDRs is allowed_cidrs (index.Options).
	AllowedCIDRs map[string][]netip.Prefix
}

// defaultStartupTimeout is the startup_timeout of the Corefile.
const defaultStartupTimeout = 5 * time.Second

// New returns an MCMirror that watches the local cluster through local,
// and the links setup and LinkHandler add; Start starts watching.
func New(local kubernetes.Interface, o Options) (*MCMirror, error) {
	if o.StartupTimeout == 0 {
		o.StartupTimeout = defaultStartupTimeout
	}
	m, ixOpts, err := newHandler(o)
	if err != nil {
		return nil, err
	}
	w, err := watch.New(local, o.watchOptions())
	if err != nil {
		return nil, err
	}
	m.watch, m.src, m.index = w, w, index.New(w, ixOpts)
	m.requeue = w.Enqueue
	return m, nil
}

// watchOptions are the settings of the informer layer.
func (o Options) watchOptions() watch.Options {
	return watch.Options{
		Cluster:        o.Cluster,
		ExportSelector: o.ExportSelector,
		StartupTimeout: o.StartupTimeout,
		StaleMaxAge:    o.StaleMaxAge,
		ClusterSet:     len(o.ClusterSet) > 0,
		Import:         o.Import,
	}
}

// newWithSource returns an MCMirror over src, which tests fake: a group is
// rebuilt at once when it is requeued.
func newWithSource(src index.Source, o Options) (*MCMirror, error) {
	m, ixOpts, err := newHandler(o)
	if err != nil {
		return nil, err
	}
	m.src, m.index = src, index.New(src, ixOpts)
	m.requeue = m.syncNow
	return m, nil
}

// newHandler returns an MCMirror without its source and index: its zones,
// their SOA records, and the gateway_health poller; and the options of its
// index.
func newHandler(o Options) (*MCMirror, index.Options, error) {
	m := &MCMirror{Fall: o.Fall, ttl: o.TTL, startupTimeout: o.StartupTimeout}
	ixOpts := index.Options{Cluster: o.Cluster, AllowedCIDRs: o.AllowedCIDRs, GatewayHealth: o.GatewayHealthURL != ""}
	cs := map[string]bool{}
	for _, z := range o.ClusterSet {
		cs[dns.Fqdn(strings.ToLower(z))] = true
	}
	for _, z := range o.Zones {
		z = dns.Fqdn(strings.ToLower(z))
		m.Zones = append(m.Zones, z)
		m.clusterset = append(m.clusterset, cs[z])
		switch {
		case isReverse(z):
			if cs[z] {
				return nil, ixOpts, fmt.Errorf("clusterset zone %s is a reverse zone", z)
			}
			ixOpts.PTR = true
		case cs[z]:
			ixOpts.ClusterSet = append(ixOpts.ClusterSet, z)
		default:
			ixOpts.Zones = append(ixOpts.Zones, z)
		}
	}
	for z := range cs {
		if !slices.Contains(m.Zones, z) {
			return nil, ixOpts, fmt.Errorf("clusterset zone %s is not one of the zones", z)
		}
	}
	if len(ixOpts.Zones)+len(ixOpts.ClusterSet) == 0 {
		return nil, ixOpts, errors.New("non-reverse zone name must be used")
	}
	serial := uint32(time.Now().Unix())
	for _, z := range m.Zones {
		m.soa = append(m.soa, []dns.RR{&dns.SOA{
			Hdr:     dns.RR_Header{Name: z, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(o.TTL, 300)},
			Ns:      dnsutil.Join("ns.dns", z),
			Mbox:    dnsutil.Join("hostmaster", z),
			Serial:  serial,
			Refresh: 7200,
			Retry:   1800,
			Expire:  86400,
			Minttl:  o.TTL,
		}})
	}
	if o.GatewayHealthURL != "" {
		m.health = newGatewayHealth(o.GatewayHealthURL, o.GatewayHealthInterval, o.Cluster, m.gatewaysChanged)
		m.health.client = healthClient(o.GatewayHealthResolver)
	}
	return m, ixOpts, nil
}

// Start starts watching and waits, at most the startup timeout, until the
// index is ready to answer.
func (m *MCMirror) Start() error {
	m.health.start()
	m.watch.Start(m.index)
	deadline := time.Now().Add(m.startupTimeout)
	for !m.watch.HasSynced() {
		if time.Now().After(deadline) {
			log.Warningf("Starting with clusters that have not synced: %s", strings.Join(m.watch.Unsynced(), ", "))
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Stop stops watching.
func (m *MCMirror) Stop() error {
	m.health.stop()
	m.watch.Stop()
	return nil
}

// ServeDNS implements the plugin.Handler interface.
func (m *MCMirror) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	q := r.Question[0]
	qname := lower(q.Name)
	zi := m.zone(qname)
	if zi < 0 {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	if m.clusterset[zi] {
		return m.serveClusterset(w, r, qname, zi)
	}

	// Only class IN is held: another class of a claimed name is refused,
	// as the server refuses it without the chaos plugin (the kubernetes
	// plugin answers it with IN records); so are zone transfers.
	refused := isTransfer(q.Qtype) || q.Qclass != dns.ClassINET
	h, found := m.index.Find(qname)
	var msg *dns.Msg
	if found && !refused {
		state := request.Request{W: w, Req: r}
		limit, extra := maxRecords(state.Size()), 0
		if r.IsEdns0() != nil {
			extra = 1 // room for the OPT record the server's writer adds
		}
		msg = answer(&h, r, qname, m.ttl, limit, extra)
	}
	if found && msg == nil && !h.Exists() {
		found = false // _<port>._<proto> of a port the name does not have
	}
	if !found {
		kind, ok := m.index.Claimed(qname, m.Zones[zi])
		if !ok {
			// Not ours: a local Service named like a mirror, a cluster we
			// do not link, a Service nobody exports.
			return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
		}
		if refused {
			return dns.RcodeRefused, nil
		}
		if m.Fall.Through(qname) {
			return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
		}
		rcode := dns.RcodeNameError
		if !m.src.HasSynced() {
			rcode = dns.RcodeServerFailure
		}
		return m.negative(w, r, zi, kind, rcode)
	}
	if refused {
		return dns.RcodeRefused, nil
	}
	kind := h.Kind()
	if msg == nil {
		return m.negative(w, r, zi, kind, dns.RcodeSuccess) // NODATA
	}
	if !m.write(w, r, msg) {
		return dns.RcodeServerFailure, errNotWritten
	}
	countAnswer(kind, dns.RcodeSuccess)
	return dns.RcodeSuccess, nil
}

// errNotWritten is returned when no reply could be written: the server
// then answers SERVFAIL.
var errNotWritten = errors.New("reply not written")

// negative writes an answer without records: NXDOMAIN, NODATA or SERVFAIL,
// with the zone's SOA in the authority section.
func (m *MCMirror) negative(w dns.ResponseWriter, r *dns.Msg, zi int, kind index.Kind, rcode int) (int, error) {
	msg := newReply(r, rcode)
	msg.Ns = m.soa[zi]
	if !m.write(w, r, msg) {
		return dns.RcodeServerFailure, errNotWritten
	}
	countAnswer(kind, rcode)
	// The answer is written: say success, as plugin.BackendError does.
	return dns.RcodeSuccess, nil
}

// isTransfer reports whether qtype asks for a zone transfer, which mcmirror
// refuses as the kubernetes plugin does: the server writes the REFUSED.
func isTransfer(qtype uint16) bool { return qtype == dns.TypeAXFR || qtype == dns.TypeIXFR }

// write hands msg to w whole. Making it fit the client's buffer (the OPT
// record, truncation with TC over UDP) is the server's writer's job
// (request.ScrubWriter), which wraps every writer, as for the kubernetes
// plugin: so a cache plugin in front keeps the whole reply, not one cut
// for the first client's buffer. A reply the writer cannot send (it did
// not pack) is logged and counted, and false returned, so that the server
// sends SERVFAIL rather than nothing.
func (m *MCMirror) write(w dns.ResponseWriter, r *dns.Msg, msg *dns.Msg) bool {
	err := w.WriteMsg(msg)
	if err == nil {
		return true
	}
	replyErrors.Inc()
	q := r.Question[0]
	log.Errorf("Reply to %s %s not written: %v", dns.Type(q.Qtype), q.Name, err)
	return false
}

// zone returns the index in m.Zones of the longest zone that holds qname
// (lowercased), or -1. Unlike plugin.Zones.Matches it does not allocate.
func (m *MCMirror) zone(qname string) int {
	best := -1
	for i, z := range m.Zones {
		if len(qname) < len(z) || !strings.HasSuffix(qname, z) {
			continue
		}
		if len(qname) > len(z) && z != "." && !labelBoundary(qname, len(qname)-len(z)-1) {
			continue
		}
		if best < 0 || len(z) > len(m.Zones[best]) {
			best = i
		}
	}
	return best
}

// lower returns name in lower case: name itself, not a copy, when it has
// no upper-case letter, as almost every query name. It looks at eight
// octets at a time, and leaves a name with an octet over 0x7f to
// strings.ToLower.
func lower(name string) string {
	const ones = 0x0101010101010101
	const high = 0x80 * ones
	i := 0
	for ; i+8 <= len(name); i += 8 {
		x := uint64(name[i]) | uint64(name[i+1])<<8 | uint64(name[i+2])<<16 | uint64(name[i+3])<<24 |
			uint64(name[i+4])<<32 | uint64(name[i+5])<<40 | uint64(name[i+6])<<48 | uint64(name[i+7])<<56
		// With every octet under 0x80, adding 0x80-'A' sets an octet's
		// high bit when it is 'A' or above, adding 0x80-'Z'-1 when it is
		// above 'Z'; no addition carries into the next octet.
		if x&high != 0 || (x+(0x80-'A')*ones)&^(x+(0x80-'Z'-1)*ones)&high != 0 {
			return strings.ToLower(name)
		}
	}
	for ; i < len(name); i++ {
		if c := name[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}

// labelBoundary reports whether name[i] is a dot that ends a label: not
// one escaped inside a label (`a\.b` is one label), which an odd number of
// backslashes right before it makes.
func labelBoundary(name string, i int) bool {
	if name[i] != '.' {
		return false
	}
	n := 0
	for j := i - 1; j >= 0 && name[j] == '\\'; j-- {
		n++
	}
	return n%2 == 0
}

// isReverse reports whether zone is a reverse zone, in-addr.arpa. and
// ip6.arpa. themselves included (dnsutil.IsReverse wants a label before).
func isReverse(zone string) bool { return dnsutil.IsReverse("."+zone) > 0 }

// Name implements the plugin.Handler interface.
func (m *MCMirror) Name() string { return pluginName }

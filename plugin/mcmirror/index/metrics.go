package index

import (
	"sync"

	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/mcmirror/mcmirror/internal/metric"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// log is the plugin's: its lines say plugin/mcmirror, whichever package
// writes them.
var log = clog.NewWithPlugin("mcmirror")

// Every label here has a handful of values: a cluster name, a record type.
var (
	metrics = metric.Set{Namespace: plugin.Namespace, Subsystem: "mcmirror"}

	indexNames = metrics.Gauge1("index_names", "Number of names in the index.")

	indexRecords = metrics.Gauge("index_records", "Number of records in the index, by type.", "type")

	droppedAddresses = metrics.Counter("dropped_addresses_total",
		"Number of endpoint addresses of a linked cluster not answered for being loopback, link-local, multicast or unspecified, or outside its allowed_cidrs, counted when an EndpointSlice first shows them.",
		"cluster")

	invalidNames = metrics.Counter("invalid_names_total",
		"Number of names left out of the index for not being valid DNS names (a label over 63 octets, a name over 255, a namespace, Service or host name that is not one RFC 1123 label), by cluster, counted once per name.",
		"cluster")

	externalNames = metrics.Counter("externalname_exports_total",
		"Number of exported ExternalName Services left out (they have no addresses to mirror), by cluster, counted once per Service.",
		"cluster")
)

// once logs and counts each bad name or ExternalName export once, however
// often its group is rebuilt; it forgets everything past maxOnce, so that
// a cluster that sends many cannot grow it without bound.
var once = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

const maxOnce = 10000

func first(key string) bool {
	once.Lock()
	defer once.Unlock()
	if once.seen[key] {
		return false
	}
	if len(once.seen) >= maxOnce {
		clear(once.seen)
	}
	once.seen[key] = true
	return true
}

// noteInvalid logs and counts a name of cluster ("" for a group's own
// names) left out for not being a valid DNS name.
func noteInvalid(cluster, name string) {
	if !first("invalid\x00" + cluster + "\x00" + name) {
		return
	}
	invalidNames.WithLabelValues(cluster).Inc()
	log.Warningf("Name %q of cluster %q left out: not a valid DNS name", name, cluster)
}

// noteExternalName logs and counts an exported ExternalName Service, which
// is not answered: it has no addresses, and a CNAME to a name outside the
// remote cluster would not resolve the same here.
func noteExternalName(cluster string, k object.GroupKey) {
	if !first("externalname\x00" + cluster + "\x00" + k.String()) {
		return
	}
	externalNames.WithLabelValues(cluster).Inc()
	log.Infof("Exported ExternalName Service %s of cluster %s left out: it has no addresses to answer", k, cluster)
}

// DeleteSeries deletes the series of cluster name, which is linked no
// more: the watches' series go with them (watch/linkseries.go).
func DeleteSeries(name string) {
	droppedAddresses.DeleteLabelValues(name)
}

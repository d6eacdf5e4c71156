package remote

import "github.com/mcmirror/mcmirror/internal/metric"

// Received counts the objects a cluster sent, listed or watched, by
// kind: what each link costs its reader. Objects a cluster does not
// export are never sent, and never counted.
var Received = metric.Set{Namespace: "coredns", Subsystem: "mcmirror_remote"}.Counter("events_received_total",
	"Number of objects received from a cluster, listed or by watch events, by kind (service, endpointslice).", "cluster", "kind")

// Forget deletes the series of cluster name: it is no longer linked.
func Forget(name string) {
	for _, k := range kindNames {
		Received.DeleteLabelValues(name, k)
	}
}

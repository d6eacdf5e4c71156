package remote

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Received counts the objects a cluster sent, listed or watched, by
// kind: what each link costs its reader. Objects a cluster does not
// export are never sent, and never counted.
var Received = promauto.NewCounterVec(prometheus.CounterOpts{
	Namespace: "coredns",
	Subsystem: "mcmirror_remote",
	Name:      "events_received_total",
	Help:      "Number of objects received from a cluster, listed or by watch events, by kind (service, endpointslice).",
}, []string{"cluster", "kind"})

// Forget deletes the series of cluster name: it is no longer linked.
func Forget(name string) {
	for _, k := range kindNames {
		Received.DeleteLabelValues(name, k)
	}
}

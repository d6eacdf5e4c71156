// Package remote is the one way mcmirror watches what a cluster exports:
// the Services it exports, each way they can be exported, and their
// EndpointSlices, listed and watched with the backoff, the watchdog and
// the health every consumer shares (listwatch.go, health.go, ways.go); and
// the lifecycle of linked clusters, added, replaced when their kubeconfig
// changes, and removed (links.go). The DNS plugin and the controller watch
// each linked cluster through it, the gateway's ingress its own cluster.
//
// Only exported objects cross the network: every list and watch carries
// the label selector of one way of export (ways.go), and the EndpointSlice
// controller copies a Service's labels onto its slices, so the API server
// sends the slices of exported Services and nothing else. A linked
// cluster's churn of what it does not export costs its readers nothing.
// A link narrowed to some namespaces (link.Namespaces) has every list and
// watch narrowed too, so that none of its consumers sees the others
// (namespaces.go).
package remote

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff is how a list or watch of a cluster retries while the cluster
// is unreachable or refuses: 250 ms doubling to 2 s, plus up to 50 %
// jitter, so a cluster that comes back is watched again within 3 s
// (client-go's own default grows to 30 s with as much jitter: up to a
// minute). It costs a failed request every 2 to 3 s per watch while a
// cluster is down.
var Backoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 100, Cap: 2 * time.Second}

// NoAnswerAfter is how long a list or watch may go without an answer
// before the cluster counts as unreachable: client-go retries a request
// whose TLS handshake times out (10 s) before it returns, and a server
// may accept and never answer. A Health reads it when it is made.
var NoAnswerAfter = 15 * time.Second

// Package peers is the wire shape of a gateway's GET /peers: what its
// prober knows of each linked cluster's gateway. The gateway serves it
// (gateway/probe.go); the DNS plugin's gateway_health, coredns-mc check
// and the end-to-end harness read it, all with this one type.
package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// State is what the prober knows of one linked cluster's gateway.
type State struct {
	// Alive is false once FailureThreshold probes in a row have failed,
	// true again after one success. Before the first probe ends it is
	// true: nothing says the peer is down.
	Alive bool `json:"alive"`
	// Probed tells whether a probe has ended yet.
	Probed bool `json:"probed"`
	// Since is when Alive last changed (or the prober started).
	Since time.Time `json:"since"`
	// Latency is the round trip of the last successful probe.
	Latency time.Duration `json:"latencyNanos"`
	// Error is the last failure, if the last probe failed.
	Error string `json:"error,omitempty"`
}

// Peer is one entry of the list: a cluster and its State.
type Peer struct {
	Cluster string `json:"cluster"`
	State
}

// Encode writes states, by cluster, as the list: a JSON array of Peer,
// sorted by cluster.
func Encode(w io.Writer, states map[string]State) error {
	out := make([]Peer, 0, len(states))
	for _, c := range slices.Sorted(maps.Keys(states)) {
		out = append(out, Peer{Cluster: c, State: states[c]})
	}
	return json.NewEncoder(w).Encode(out)
}

// Decode reads the list and returns the states by cluster. Anything but a
// JSON array of objects that each name a cluster and say whether it is
// alive is an error: a body that is not a gateway's must not pass for one
// that says every peer is down.
func Decode(r io.Reader) (map[string]State, error) {
	var list []struct {
		Peer
		// Alive, shallower than the State's, tells an absent alive
		// from false.
		Alive *bool `json:"alive"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, fmt.Errorf("not a list of peer states: %w", err)
	}
	out := make(map[string]State, len(list))
	for i, p := range list {
		if p.Cluster == "" || p.Alive == nil {
			return nil, fmt.Errorf("peer state %d has no cluster or no alive", i)
		}
		p.State.Alive = *p.Alive
		out[p.Cluster] = p.State
	}
	return out, nil
}

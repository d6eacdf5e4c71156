package controller

import (
	"maps"
	"slices"
)

// feedStarved enqueues the keys waiting for egress ports.
func (c *Controller) feedStarved() {
	c.mu.Lock()
	keys := slices.Collect(maps.Keys(c.starved))
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// addWanted remembers that key wants name (namespace/name), held by an
// object that is not key's. Called with c.mu held.
func (c *Controller) addWanted(name, key string) {
	if c.wanted[name] == nil {
		c.wanted[name] = map[string]bool{}
	}
	c.wanted[name][key] = true
}

// forgetWanted forgets the names key wanted; its sync records them again.
// Called with c.mu held.
func (c *Controller) forgetWanted(key string) {
	for n, keys := range c.wanted {
		delete(keys, key)
		if len(keys) == 0 {
			delete(c.wanted, n)
		}
	}
}

// setStatus records a key's result and refreshes the gauges of its
// cluster.
func (c *Controller) setStatus(key string, st keyStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.status[key]
	if st.services == 0 && st.pods == 0 && st.reason == "" {
		delete(c.status, key)
	} else {
		c.status[key] = st
	}
	clusters := map[string]bool{st.cluster: true}
	if had {
		clusters[old.cluster] = true
	}
	for cl := range clusters {
		var svcs, pods int
		reasons := map[string]int{}
		for _, s := range c.status {
			if s.cluster != cl {
				continue
			}
			svcs += s.services
			pods += s.pods
			if s.reason != "" {
				reasons[s.reason]++
			}
		}
		mirrorsGauge.WithLabelValues(cl, "service").Set(float64(svcs))
		mirrorsGauge.WithLabelValues(cl, "pod").Set(float64(pods))
		for _, r := range notMirroredReasons {
			notMirroredGauge.WithLabelValues(cl, r).Set(float64(reasons[r]))
		}
	}
}

package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// linkState is what one process says of its links.
type linkState struct {
	up, synced map[string]float64 // by cluster
	errors     float64            // link_errors_total, every cluster and reason
	names      float64            // coredns_mcmirror_index_names (DNS only)
	addrs      float64            // coredns_mcmirror_index_records{type="A"} (DNS only)
	mirrors    float64            // coredns_mcmirror_link_objects{kind="mirror"}: local mirror Services (DNS only)
	events     float64            // coredns_mcmirror_remote_events_received_total
}

// readLinks scrapes one process: a DNS replica's metrics carry the
// plugin's names (prefix coredns_mcmirror_), a controller's the
// controller's (coredns_mcmirror_controller_).
func readLinks(url, prefix string) (linkState, error) {
	ss, err := scrapeURL(url)
	if err != nil {
		return linkState{}, err
	}
	st := linkState{up: map[string]float64{}, synced: map[string]float64{}}
	for _, s := range ss.each(prefix + "link_up") {
		st.up[s.labels["cluster"]] = s.value
	}
	for _, s := range ss.each(prefix + "link_synced") {
		st.synced[s.labels["cluster"]] = s.value
	}
	st.errors = ss.sum(prefix+"link_errors_total", nil)
	st.names = ss.sum("coredns_mcmirror_index_names", nil)
	st.addrs = ss.sum("coredns_mcmirror_index_records", map[string]string{"type": "A"})
	st.mirrors = ss.sum("coredns_mcmirror_link_objects", map[string]string{"kind": "mirror"})
	st.events = ss.sum("coredns_mcmirror_remote_events_received_total", nil)
	return st, nil
}

const (
	dnsPrefix = "coredns_mcmirror_"
	ctlPrefix = "coredns_mcmirror_controller_"
)

// processLinks is what every process of d says, replicas first.
type processLinks struct {
	dns, ctl []linkState
}

func (f *fleetData) readAll(d *deployment) (processLinks, error) {
	var pl processLinks
	pl.dns = make([]linkState, len(d.replicas))
	ctls := d.ctls()
	pl.ctl = make([]linkState, len(ctls))
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	set := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for i, r := range d.replicas {
		wg.Go(func() {
			st, err := readLinks(r.dns.MetricsURL, dnsPrefix)
			if err != nil {
				set(fmt.Errorf("%s DNS replica: %w", f.name(r.cluster), err))
			}
			pl.dns[i] = st
		})
	}
	for c, ctl := range ctls {
		if ctl == nil {
			continue
		}
		wg.Go(func() {
			st, err := readLinks(ctl.MetricsURL(), ctlPrefix)
			if err != nil {
				set(fmt.Errorf("%s controller: %w", f.name(c), err))
			}
			pl.ctl[c] = st
		})
	}
	wg.Wait()
	return pl, first
}

// unhealthy lists the links of d that are not synced and up: every
// replica's local cluster and, in direct mode, every other cluster; every
// controller's link to every other cluster.
func (f *fleetData) unhealthy(d *deployment, pl processLinks) []string {
	var bad []string
	check := func(who string, st linkState, cluster string) {
		if st.up[cluster] != 1 || st.synced[cluster] != 1 {
			bad = append(bad, who+"→"+cluster)
		}
	}
	for i, r := range d.replicas {
		for c := range f.clusters {
			if c == r.cluster || d.m == direct {
				check(fmt.Sprintf("%s/dns", f.name(r.cluster)), pl.dns[i], f.name(c))
			}
		}
	}
	for i := range pl.ctl {
		for c := range f.clusters {
			if c != i {
				check(fmt.Sprintf("%s/controller", f.name(i)), pl.ctl[i], f.name(c))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// waitLinks waits until every link of d is synced and up.
func (f *fleetData) waitLinks(d *deployment, limit time.Duration) error {
	var bad []string
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		pl, err := f.readAll(d)
		if err != nil {
			bad = []string{err.Error()}
			continue
		}
		if bad = f.unhealthy(d, pl); len(bad) == 0 {
			return nil
		}
	}
	return fmt.Errorf("links not healthy after %s: %s", limit, abbrev(bad, 5))
}

// complete reports whether a replica's index holds every cluster's
// exports: per linked cluster and Service its name, per Service name one
// -global name (pod names are found under their Service, not counted),
// and every endpoint's address; and whether the controller has written
// every mirror Service (flat-mode mirrors, in either mode), so that
// nothing is still being written when the fleet is measured.
func (f *fleetData) complete(st linkState) bool {
	cfg := f.cfg
	held := float64((cfg.clusters - 1) * cfg.services)
	return st.names == float64(cfg.clusters*cfg.services) && st.addrs == float64(endpointsHeld(cfg)) && st.mirrors == held
}

// waitNames waits until every replica of d holds every name, and returns
// how long that took.
func (f *fleetData) waitNames(d *deployment, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	var short []string
	// What is missing is logged every half minute, so that a wait that
	// does not end says why while it lasts.
	next := start.Add(30 * time.Second)
	for deadline := start.Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		if time.Now().After(next) && len(short) > 0 {
			logf("%s: waiting for every name (%.0fs): %s", d.m, time.Since(start).Seconds(), abbrev(short, 3))
			next = time.Now().Add(30 * time.Second)
		}
		pl, err := f.readAll(d)
		if err != nil {
			short = []string{err.Error()}
			continue
		}
		short = short[:0]
		for i, r := range d.replicas {
			if !f.complete(pl.dns[i]) {
				st := pl.dns[i]
				short = append(short, fmt.Sprintf("%s: %.0f names, %.0f addresses, %.0f mirrors", f.name(r.cluster), st.names, st.addrs, st.mirrors))
			}
		}
		if len(short) == 0 {
			return time.Since(start), nil
		}
	}
	return time.Since(start), fmt.Errorf("not every replica holds every name after %s (%d names, %d addresses, %d mirrors wanted): %s",
		limit, f.cfg.clusters*f.cfg.services, endpointsHeld(f.cfg), (f.cfg.clusters-1)*f.cfg.services, abbrev(short, 5))
}

// waitOwnNames waits until replica r's index holds the -global name of
// each of its own cluster's Services, which are the only ones loaded.
func (f *fleetData) waitOwnNames(r *replica, limit time.Duration) error {
	var st linkState
	var err error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		if st, err = readLinks(r.dns.MetricsURL, dnsPrefix); err == nil && st.names == float64(f.cfg.services) {
			return nil
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s's replica holds %.0f names after %s, not its own %d", f.name(r.cluster), st.names, limit, f.cfg.services)
}

// abbrev joins the first n of list and counts the rest.
func abbrev(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:n], ", "), len(list)-n)
}

package check

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mcmirror/mcmirror/internal/fleet"
)

// FleetReport is what a check of a fleet found: one line per ordered pair.
type FleetReport struct {
	// FormatVersion is FormatVersion.
	FormatVersion int `json:"formatVersion"`
	// Topology is the --topology the pairs come from.
	Topology string `json:"topology"`
	// Clusters are the members checked, in the order given.
	Clusters []FleetCluster `json:"clusters"`
	// Pairs are the judgements, sources in the order of Clusters, then
	// targets.
	Pairs []PairCheck `json:"pairs"`
	// Summary counts the pairs of each status.
	Summary Summary `json:"summary"`
}

// FleetCluster is one member of a fleet report.
type FleetCluster struct {
	Name    string `json:"name"`
	Context string `json:"context"`
	Server  string `json:"server"`
}

// NewFleetReport makes the report of pairs over members, with its summary.
func NewFleetReport(topology string, members []fleet.Member, servers map[string]string, pairs []PairCheck) *FleetReport {
	r := &FleetReport{FormatVersion: FormatVersion, Topology: topology, Pairs: pairs}
	for _, m := range members {
		r.Clusters = append(r.Clusters, FleetCluster{Name: m.Name, Context: m.Context, Server: servers[m.Context]})
	}
	if r.Pairs == nil {
		r.Pairs = []PairCheck{}
	}
	for _, p := range pairs {
		r.Summary.count(p.Status)
	}
	return r
}

// ExitCode is 1 when any pair failed, 0 otherwise.
func (r *FleetReport) ExitCode() int { return r.Summary.exitCode() }

// WriteJSON writes the report as one JSON object.
func (r *FleetReport) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

// WriteText writes one table line per pair, then each problem of a pair
// that is not ok with its fix, then the summary.
func (r *FleetReport) WriteText(w io.Writer) error {
	names := make([]string, len(r.Clusters))
	for i, c := range r.Clusters {
		names[i] = c.Name
	}
	fmt.Fprintf(w, "mcmirror check of %d clusters (%s), topology %s: %d pairs\n\n", len(r.Clusters), strings.Join(names, ", "), r.Topology, len(r.Pairs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tTARGET\tLINKED\tSYNCED\tLAST CHANGE\tGATEWAY\tSTATUS")
	for _, p := range r.Pairs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Source, p.Target, p.Linked, p.Synced, p.LastChange, p.Gateway, p.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, p := range r.Pairs {
		for _, res := range p.Problems {
			if first {
				fmt.Fprintln(w)
				first = false
			}
			fmt.Fprintf(w, "%-4s  %s: %s\n", res.Status, res.Name(), oneLine(res.Message))
			if res.Fix != "" {
				fmt.Fprintf(w, "      fix: %s\n", oneLine(res.Fix))
			}
		}
	}
	_, err := fmt.Fprintf(w, "\n%d ok, %d warn, %d fail\n", r.Summary.OK, r.Summary.Warn, r.Summary.Fail)
	return err
}

package check

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Status is the outcome of one check.
type Status string

// The three outcomes. Only Fail makes `coredns-mc check` exit non-zero.
const (
	// OK: nothing to do.
	OK Status = "ok"
	// Warn: works, but something is off or could not be checked from here.
	Warn Status = "warn"
	// Fail: something does not work, or will not; Fix says what to do.
	Fail Status = "fail"
)

// rank orders statuses by severity.
func (s Status) rank() int {
	switch s {
	case Fail:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// worse returns the more severe of s and o.
func (s Status) worse(o Status) Status {
	if o.rank() > s.rank() {
		return o
	}
	return s
}

// mostSevere is the first of rs with the most severe status.
func mostSevere(rs []Result) Result {
	return slices.MaxFunc(rs, func(a, b Result) int { return a.Status.rank() - b.Status.rank() })
}

// Result is one line of the report: one check of one subject.
type Result struct {
	// ID names the check; the IDs are listed in deploy/check.md and do not
	// change between releases.
	ID string `json:"id"`
	// Subject is what the result is about when a check has one result per
	// thing, such as a linked cluster's name; empty otherwise.
	Subject string `json:"subject,omitempty"`
	Status  Status `json:"status"`
	// Message says what was found, in one line.
	Message string `json:"message"`
	// Fix says what to do, in one line; set when Status is not OK.
	Fix string `json:"fix,omitempty"`
}

// judged is r with its status, message and fix.
func (r Result) judged(s Status, msg, fix string) Result {
	r.Status, r.Message, r.Fix = s, msg, fix
	return r
}

// Name is the ID with the subject, as the text report prints it.
func (r Result) Name() string {
	if r.Subject == "" {
		return r.ID
	}
	return r.ID + " " + r.Subject
}

// FormatVersion is the version of the JSON report's structure. It changes
// only when a field changes meaning or goes away; fields may be added.
const FormatVersion = 1

// Report is what one run of the checks found.
type Report struct {
	// FormatVersion is FormatVersion.
	FormatVersion int `json:"formatVersion"`
	// Cluster is this cluster's name as its mcmirror parts are configured
	// (the controller's or the gateway's --cluster), empty when none is.
	Cluster string `json:"cluster"`
	// Server is the URL of the API server checked.
	Server string `json:"server"`
	// Results are the checks, in a fixed order (deploy/check.md).
	Results []Result `json:"results"`
	// Summary counts the results of each status.
	Summary Summary `json:"summary"`
}

// Summary counts results by status.
type Summary struct {
	OK   int `json:"ok"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
}

// NewReport makes a report of results, with its summary.
func NewReport(cluster, server string, results []Result) *Report {
	r := &Report{FormatVersion: FormatVersion, Cluster: cluster, Server: server, Results: results}
	if r.Results == nil {
		r.Results = []Result{}
	}
	for _, res := range results {
		r.Summary.count(res.Status)
	}
	return r
}

// count adds one of status s.
func (s *Summary) count(st Status) {
	switch st {
	case OK:
		s.OK++
	case Warn:
		s.Warn++
	case Fail:
		s.Fail++
	}
}

// exitCode is 1 when anything failed, 0 otherwise.
func (s Summary) exitCode() int {
	if s.Fail > 0 {
		return 1
	}
	return 0
}

// ExitCode is 1 when any check failed, 0 otherwise.
func (r *Report) ExitCode() int { return r.Summary.exitCode() }

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

// writeJSON writes v as one indented JSON object.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteText writes one line per result, STATUS NAME MESSAGE, with a
// "fix:" line under each result that is not ok, then the summary.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "mcmirror check of %s at %s\n\n", cmp.Or(r.Cluster, "(no cluster name configured)"), r.Server)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", res.Status, res.Name(), oneLine(res.Message))
		if res.Status != OK && res.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", oneLine(res.Fix))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d ok, %d warn, %d fail\n", r.Summary.OK, r.Summary.Warn, r.Summary.Fail)
	return err
}

// oneLine keeps a message on its line whatever an error text holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

package fleet

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Result is what link or unlink did to one pair.
type Result string

// The results of a pair.
const (
	// Linked: link wrote something (the grant, the token, the link Secret).
	Linked Result = "linked"
	// Unlinked: unlink removed something.
	Unlinked Result = "unlinked"
	// Unchanged: everything was as wanted already; nothing was written.
	Unchanged Result = "unchanged"
	// Failed: the pair is not as wanted; Detail says why.
	Failed Result = "failed"
)

// Outcome is the result of one pair.
type Outcome struct {
	Pair   Pair
	Result Result
	// Detail says, in one line, what was written, or why nothing was, or
	// what failed.
	Detail string
}

// FailedCount counts the outcomes that failed.
func FailedCount(outcomes []Outcome) int {
	n := 0
	for _, o := range outcomes {
		if o.Result == Failed {
			n++
		}
	}
	return n
}

// WriteOutcomes writes one line per pair, SOURCE TARGET RESULT DETAIL, in
// the order given, then a line that counts each result.
func WriteOutcomes(w io.Writer, outcomes []Outcome) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tTARGET\tRESULT\tDETAIL")
	counts := map[Result]int{}
	for _, o := range outcomes {
		counts[o.Result]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Pair.Source.Name, o.Pair.Target.Name, o.Result, strings.Join(strings.Fields(o.Detail), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var parts []string
	for _, r := range []Result{Linked, Unlinked, Unchanged, Failed} {
		if counts[r] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[r], r))
		}
	}
	noun := "pairs"
	if len(outcomes) == 1 {
		noun = "pair"
	}
	_, err := fmt.Fprintf(w, "\n%d %s: %s\n", len(outcomes), noun, strings.Join(parts, ", "))
	return err
}

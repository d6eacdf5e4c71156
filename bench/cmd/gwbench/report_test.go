package main

import (
	"slices"
	"testing"
)

func TestChangedCode(t *testing.T) {
	// What `git status --porcelain` printed for a run with the gateway's
	// README changed and not staged, a source file changed and staged, a
	// new file, and a test.
	out := " M gateway/README.md\nM  gateway/egress.go\n?? gateway/h2.go\n M gateway/egress_test.go\n"
	got := changedCode(out)
	want := []string{"gateway/egress.go", "gateway/h2.go"}
	if !slices.Equal(got, want) {
		t.Fatalf("changedCode = %q, want %q", got, want)
	}
	if got := changedCode(" M gateway/proxy.go\n"); !slices.Equal(got, []string{"gateway/proxy.go"}) {
		t.Fatalf("an unstaged change first: changedCode = %q, want [gateway/proxy.go]", got)
	}
	if got := changedCode(""); len(got) != 0 {
		t.Fatalf("a clean tree: changedCode = %q, want none", got)
	}
}

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChangedCode(t *testing.T) {
	// What `git status --porcelain` printed for a run with the gateway's
	// README changed and not staged, a source file changed and staged, a
	// new file, and a test.
	out := " M gateway/README.md\nM  gateway/egress.go\n?? gateway/h2.go\n M gateway/egress_test.go\n"
	require.Equal(t, []string{"gateway/egress.go", "gateway/h2.go"}, changedCode(out))
	require.Equal(t, []string{"gateway/proxy.go"}, changedCode(" M gateway/proxy.go\n"), "an unstaged change first")
	require.Empty(t, changedCode(""), "a clean tree")
}

// The memory target is the gateway pair's RSS per idle connection against
// the HAProxy pair's in the same run, runs with a failed sample left out.
func TestMemoryTargetPerRun(t *testing.T) {
	res := newResults(3)
	kib := func(ok bool, perConn int64) memSample {
		return memSample{ok: ok, before: 0, after: perConn * 1024 * 2000, conns: 2000}
	}
	res.mem["gateway"] = []memSample{kib(true, 52), kib(true, 60), kib(false, 10)}
	res.mem["haproxy"] = []memSample{kib(true, 58), kib(true, 58), kib(true, 58)}
	var mem target
	for _, tg := range (&report{res: res}).targets() {
		if tg.key == "memory" {
			mem = tg
		}
	}
	if len(mem.values) != 2 || mem.values[0] >= 1 || mem.values[1] <= 1 {
		t.Fatalf("memory ratios per run = %v, want [52/58 60/58]", mem.values)
	}
	require.Equal(t, "on the line (1 of 2 runs met it)", mem.verdict())
}

package main

import (
	"math"
	"slices"
	"strings"
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
	if got := mem.verdict(); got != "on the line (1 of 2 runs met it)" {
		t.Fatalf("verdict %q", got)
	}
}

// abTable: a measure with direct's values has its column, and round trips
// compare the time added to direct's; memory has no direct column.
func TestABTable(t *testing.T) {
	sides := []abSide{{"gateway", "gateway pair"}, {"haproxy", "HAProxy pair"}}
	var b strings.Builder
	abTable(&b, "rr", "round trip", "p50 µs", map[string][]float64{
		"direct": {10}, "gateway": {110}, "haproxy": {210},
	}, sides, 1)
	want := "round trip (p50 µs):\n\n| run | direct | gateway | haproxy | added gateway ÷ HAProxy |\n|---|---:|---:|---:|---:|\n" +
		"| 1 | 10.0 | 110.0 | 210.0 | 0.500 |\n\n- rr, gateway pair ÷ HAProxy: median 0.500 (0.500–0.500) over 1 runs\n\n"
	if b.String() != want {
		t.Fatalf("rr table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	abTable(&b, "mem", "memory", "KiB", map[string][]float64{"gateway": {52, math.NaN()}, "haproxy": {58, 58}}, sides, 2)
	want = "memory (KiB):\n\n| run | gateway | haproxy | gateway ÷ HAProxy |\n|---|---:|---:|---:|\n" +
		"| 1 | 52.0 | 58.0 | 0.897 |\n| 2 | NaN | 58.0 | NaN |\n\n- mem, gateway pair ÷ HAProxy: median 0.897 (0.897–0.897) over 1 runs\n\n"
	if b.String() != want {
		t.Fatalf("mem table:\n%s\nwant:\n%s", b.String(), want)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The per-query rows count every form, name each one that misses, and
// say which forms the server's writer alone takes past 1 µs.
func TestPerQueryRows(t *testing.T) {
	out := `goos: linux
BenchmarkServeDNS/cluster/A-2         	 2585174	       460.8 ns/op	     256 B/op	       1 allocs/op
BenchmarkServeDNS/cluster/SRV-2       	  962362	      1219 ns/op	     576 B/op	       3 allocs/op
BenchmarkServeDNS/global/SRV-2        	  279931	      4279 ns/op	    2416 B/op	      13 allocs/op
BenchmarkWriteReply/cluster/A-2       	 5309426	       226.7 ns/op	       0 B/op	       0 allocs/op
BenchmarkWriteReply/cluster/SRV-2     	 1674932	       716.3 ns/op	       0 B/op	       0 allocs/op
BenchmarkWriteReply/global/SRV-2      	  347606	      3354 ns/op	    1424 B/op	      10 allocs/op
BenchmarkLookup-2                     	24618786	        48.18 ns/op	       0 B/op	       0 allocs/op
`
	path := filepath.Join(t.TempDir(), "gobench.txt")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
	rows := perQueryRows(readGoBench(path))
	require.Len(t, rows, 2)
	for _, want := range []string{"met by 1 of 3 forms", "cluster/SRV 1219 ns, 3 allocs", "global/SRV 4279 ns, 13 allocs", "**missed**"} {
		assert.Contains(t, rows[0], want)
	}
	assert.NotContains(t, rows[0], "cluster/A ", "names a form that meets the target")
	for _, want := range []string{"over 1 µs: global/SRV 3354 ns.", "at most 925 ns (global/SRV)", "3 allocs (cluster/SRV)"} {
		assert.Contains(t, rows[1], want)
	}
	assert.Nil(t, perQueryRows(nil), "rows without benchmarks")
}

// cumShares reads the cum% column of `pprof -top -cum` by function name,
// less its module path.
func TestCumShares(t *testing.T) {
	top := `File: coredns-mc
Showing top 60 nodes out of 145
      flat  flat%   sum%        cum   cum%
         0     0%  1.27%      2.60s 55.08%  github.com/mcmirror/mcmirror/plugin/mcmirror.(*MCMirror).ServeDNS
     1.86s 39.41% 40.89%      1.86s 39.41%  internal/runtime/syscall/linux.Syscall6
     0.04s  0.85% 45.76%      0.34s  7.20%  runtime.newstack
`
	assert.Equal(t, map[string]float64{
		"mcmirror.(*MCMirror).ServeDNS":           55.08,
		"internal/runtime/syscall/linux.Syscall6": 39.41,
		"runtime.newstack":                        7.20,
	}, cumShares(top))
}

// A memory point is the median of each figure of its processes.
func TestMedianPoint(t *testing.T) {
	m := medianPoint([]memPoint{
		{eps: 10, inuse: 30, alloc: 5, rss: 7},
		{eps: 10, inuse: 10, alloc: 6, rss: 9},
		{eps: 10, inuse: 20, alloc: 4, rss: 8},
	})
	assert.Equal(t, memPoint{eps: 10, inuse: 20, alloc: 5, rss: 8, repeats: 3}, m)
}

// The forms that miss are profiled each alone, from the plugin's real test
// binary: the profile holds ServeDNS, the writer's share of it is a part of
// it, and the row shows it in nanoseconds of the form's figure.
func TestProfileForms(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcmirror.test")
	// Built as the image's coredns-mc is (CGO_ENABLED=0, -trimpath), which
	// make test builds first: on an empty build cache this compile then
	// reuses that one's packages instead of compiling CoreDNS once more.
	build := exec.Command("go", "test", "-c", "-trimpath", "-o", bin, "../../../plugin/mcmirror")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "go test -c: %s", b)
	gb := []goBench{
		{name: "BenchmarkServeDNS/cluster/A", ns: 420, allocs: 1},
		{name: "BenchmarkServeDNS/global/SRV-port-edns", ns: 2500, allocs: 3},
		{name: "BenchmarkServeDNS/no/such-form", ns: 1200, allocs: 1},
	}
	forms := missedForms(gb)
	require.Len(t, forms, 2, "want global/SRV-port-edns and no/such-form")
	require.Equal(t, "global/SRV-port-edns", forms[0].name)
	// A second of the benchmark: enough CPU samples for both shares to show
	// on a loaded machine (200 ms gave 6 samples at load 6).
	profs := profileForms(bin, dir, "1s", forms)
	require.Len(t, profs, 2)
	p := profs[0]
	require.Empty(t, p.err, "global/SRV-port-edns")
	assert.FileExists(t, filepath.Join(dir, "perquery.global_SRV-port-edns.cpu.pprof"))
	total, writer := p.shares["mcmirror.(*MCMirror).ServeDNS"], p.shares["request.(*ScrubWriter).WriteMsg"]
	// The writer runs inside ServeDNS: its share is at most ServeDNS's. They
	// are equal only when every sample of ServeDNS fell in the writer, which
	// a loaded machine's few samples can give; more would be a parse error.
	if total <= 0 || writer <= 0 || writer > total {
		t.Errorf("ServeDNS %v %%, its writer %v %%: want 0 < writer <= ServeDNS", total, writer)
	}
	// The pattern matched no benchmark: no ServeDNS samples, said so.
	rows := formProfileRows(profs)
	if !strings.HasPrefix(rows[0], "| global/SRV-port-edns | 2500 ns, 3 allocs | ") || !strings.Contains(rows[0], " ns) |") {
		t.Errorf("row %q", rows[0])
	}
	assert.Contains(t, rows[1], "not profiled", "row of a form with no benchmark")
}

// A form's parts are shares of ServeDNS's samples, and the nanoseconds of
// the form's figure those shares are.
func TestFormProfileRows(t *testing.T) {
	rows := formProfileRows([]formProfile{{
		bench: goBench{name: "cluster/SRV", ns: 1200, allocs: 3},
		shares: map[string]float64{
			"mcmirror.(*MCMirror).ServeDNS":   80,
			"request.(*ScrubWriter).WriteMsg": 40,
			"mcmirror.answer":                 20,
		},
	}})
	assert.Equal(t, []string{"| cluster/SRV | 1200 ns, 3 allocs | 50 % (600 ns) | 0 % (0 ns) | 0 % (0 ns) | 0 % (0 ns) | 25 % (300 ns) | 0 % (0 ns) |"}, rows)
}

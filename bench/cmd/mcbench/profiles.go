package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

// serverProfile is a CPU profile of a server under dnsperf.
type serverProfile struct {
	key  string
	path string
	top  string // the top of `go tool pprof -top`, flat then -cum; or why not
}

// profileUnderLoad takes a 5 s CPU profile of s while dnsperf drives it,
// into <key>.cpu.pprof, with the top of `go tool pprof -top`.
func profileUnderLoad(s *server, qfile string, cfg *config) serverProfile {
	prof := serverProfile{key: s.key, path: filepath.Join(cfg.out, s.key+".cpu.pprof")}
	if s.pprof == "" {
		prof.top = "no pprof listener"
		return prof
	}
	done := make(chan error, 1)
	go func() { done <- proc.Fetch(s.pprof+"/profile?seconds=5", prof.path) }()
	time.Sleep(200 * time.Millisecond)
	dnsperf(s, qfile, 6*time.Second, clientCPU, filepath.Join(cfg.out, "logs"))
	if err := <-done; err != nil {
		prof.top = "profile failed: " + err.Error()
		return prof
	}
	flat, err := proc.Top(cfg.cmc, prof.path, "-nodecount=15")
	if err == nil {
		var cum string
		if cum, err = proc.Top(cfg.cmc, prof.path, "-cum", "-nodecount=25"); err == nil {
			prof.top = flat + "\n--- by cumulative time (-cum):\n" + proc.Table(cum)
		}
	}
	if err != nil {
		prof.top = err.Error()
	}
	return prof
}

// sharedFuncs are the functions whose share of the A10 and A1 profiles
// profileShares compares: the plugin's lookup and answer, the server's
// writer, allocation, GC and goroutine stack growth.
var sharedFuncs = []string{
	"mcmirror.(*MCMirror).ServeDNS",
	"index.(*Index).Find",
	"index.(*member).findPod",
	"mcmirror.answer",
	"request.(*ScrubWriter).WriteMsg",
	"runtime.mallocgc",
	"runtime.gcBgMarkWorker",
	"runtime.newstack",
	"internal/runtime/syscall/linux.Syscall6",
}

// profileShares returns rows of a table: for each of sharedFuncs, its
// cumulative share of each profile's samples (`go tool pprof -top -cum`
// of binary), a cell per profile; nil with fewer than two profiles.
func profileShares(binary string, profs []serverProfile) []string {
	if len(profs) < 2 {
		return nil
	}
	shares := make([]map[string]float64, len(profs))
	for i, prof := range profs {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=500", binary, prof.path).Output()
		if err != nil {
			return nil
		}
		shares[i] = cumShares(string(out))
	}
	var rows []string
	for _, f := range sharedFuncs {
		row := "| `" + f + "` |"
		for i := range profs {
			v, ok := shares[i][f]
			cell := "–"
			if ok {
				cell = fmt.Sprintf("%.2f%%", v)
			}
			row += " " + cell + " |"
		}
		rows = append(rows, row)
	}
	return rows
}

// cumShares reads `go tool pprof -top -cum` output: the cum% of each
// function, by its name less the module path
// (github.com/mcmirror/mcmirror/plugin/mcmirror/index.(*Index).Find is
// index.(*Index).Find).
func cumShares(top string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err != nil {
			continue
		}
		name := f[5]
		if i := strings.LastIndex(name, "/"); i >= 0 && !strings.HasPrefix(name, "internal/") {
			name = name[i+1:]
		}
		if _, ok := m[name]; !ok {
			m[name] = v
		}
	}
	return m
}

func profileKeys(profs []serverProfile) []string {
	var keys []string
	for _, prof := range profs {
		keys = append(keys, prof.key)
	}
	return keys
}

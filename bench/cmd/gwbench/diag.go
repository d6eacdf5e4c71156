package main

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syscallCount is what strace counted in both proxies of a pair during a
// round-trip run, per round trip.
type syscallCount struct {
	roundTrips int
	total      float64
	errors     float64 // calls that failed (EAGAIN on a drained socket, mostly)
	calls      map[string]float64
}

// countSyscalls attaches `strace -f -c` to both proxies of s, runs the
// round-trip load once (not counted in the results: strace slows every
// call), and returns the system calls per round trip. It explains what a
// CPU profile cannot: where time is spent waiting on wake-ups.
func countSyscalls(cfg *config, s *setup) (*syscallCount, error) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		return nil, fmt.Errorf("strace not installed")
	}
	out := filepath.Join(cfg.out, "logs", "gw-strace."+s.key+".txt")
	argv := []string{strace, "-f", "-c", "-qq", "-o", out}
	for _, p := range s.procs {
		argv = append(argv, "-p", strconv.Itoa(p.PID()))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond) // attached to every thread
	res, rerr := runClient(cfg, time.Minute, "-mode", "rr", "-size", strconv.Itoa(cfg.size), "-duration", cfg.shortDur.String(), "-addr", s.echo)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if rerr != nil {
		return nil, rerr
	}
	if res.N == 0 {
		return nil, fmt.Errorf("no round trips")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	// The warm-up round trips of the client count as well.
	n := float64(res.N + 200)
	c := &syscallCount{roundTrips: res.N + 200, calls: map[string]float64{}}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || len(f) > 6 || f[len(f)-1] == "total" {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		calls, err := strconv.Atoi(f[3])
		if err != nil {
			continue
		}
		c.calls[f[len(f)-1]] = float64(calls) / n
		c.total += float64(calls) / n
		if len(f) == 6 {
			e, _ := strconv.Atoi(f[4])
			c.errors += float64(e) / n
		}
	}
	if c.total == 0 {
		return nil, fmt.Errorf("strace counted nothing: %s", strings.TrimSpace(string(b)))
	}
	return c, nil
}

// String lists the calls per round trip, most frequent first.
func (c *syscallCount) String() string {
	names := make([]string, 0, len(c.calls))
	for k, v := range c.calls {
		if v >= 0.05 {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.calls[b], c.calls[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.1f", k, c.calls[k])
	}
	return fmt.Sprintf("%.1f system calls per round trip, %.1f of them failed (%s)", c.total, c.errors, strings.Join(parts, ", "))
}

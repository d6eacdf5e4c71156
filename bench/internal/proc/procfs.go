package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// CPUSeconds returns the user+system CPU seconds of a process so far, 0 if
// they cannot be read.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name in parentheses: state is field 3,
	// utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

var reRSS = regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`)

// RSS returns a process's resident set in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := reRSS.FindSubmatch(b)
	if m == nil {
		return 0, errors.New("no VmRSS")
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n * 1024, nil
}

// Machine describes the CPU, their number, the kernel and the Go version,
// for a report.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	return fmt.Sprintf("%s, %d CPUs, Linux %s, %s", model, runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.Version())
}

// LoadAvg returns /proc/loadavg's first three figures, "?" when it cannot
// be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

// runClient runs `gwbench client` pinned to the client CPU and returns what
// it printed: one JSON result.
func runClient(cfg *config, timeout time.Duration, args ...string) (clientResult, error) {
	argv := append([]string{"taskset", "-c", cfg.clientCPU, cfg.self, "client"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if s := stderr.String(); s != "" {
		proc.AppendLog(filepath.Join(cfg.out, "logs", "gw-client.log"), fmt.Sprintf("### %s %s\n%s", time.Now().Format(time.RFC3339), strings.Join(argv, " "), s))
	}
	var r clientResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		if err == nil {
			err = jerr
		}
		return r, fmt.Errorf("client %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return r, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loadavg returns /proc/loadavg's first three figures.
func loadavg() string {
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

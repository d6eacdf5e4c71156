package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

// pinned is `gwbench args...`, this binary, pinned to cpu with
// GOMAXPROCS=1, and killed should gwbench die.
func pinned(ctx context.Context, cfg *config, cpu string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, cfg.self}, args...)...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// runClient runs `gwbench client` pinned to the client CPU and returns what
// it printed: one JSON result.
func runClient(cfg *config, timeout time.Duration, args ...string) (clientResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := pinned(ctx, cfg, cfg.clientCPU, append([]string{"client"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if s := stderr.String(); s != "" {
		proc.AppendLog(filepath.Join(cfg.out, "logs", "gw-client.log"), fmt.Sprintf("### %s %s\n%s", time.Now().Format(time.RFC3339), strings.Join(cmd.Args, " "), s))
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

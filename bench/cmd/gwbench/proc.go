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

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

// coredns-mc gives the Go runtime the memory limit of its cgroup, as a
// container's limits.memory sets it, unless the environment says
// otherwise: the DNS server, run in a memory cgroup of 300 MiB, reports in
// go_gc_gomemlimit_bytes the cgroup's limit, GOMEMLIMIT's, or the share
// AUTOMEMLIMIT asks for.
func TestMemoryLimitFromCgroup(t *testing.T) {
	const limit = 300 << 20
	for _, tc := range []struct {
		name string
		env  []string
		want float64
	}{
		{"cgroup", nil, limit},
		{"gomemlimit", []string{"GOMEMLIMIT=100MiB"}, 100 << 20},
		{"automemlimit", []string{"AUTOMEMLIMIT=0.5"}, limit / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg, err := harness.NewMemoryCgroup("memlimit-"+tc.name, limit)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, cg.Remove()) })

			metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			corefile := filepath.Join(t.TempDir(), "Corefile")
			require.NoError(t, os.WriteFile(corefile, fmt.Appendf(nil, ".:%d {\n\tbind 127.0.0.1\n\tprometheus %s\n\twhoami\n}\n",
				harness.FreePort(t), metrics), 0o644))

			ctx, cancel := context.WithCancel(context.Background())
			argv := cg.Wrap([]string{os.Args[0], "-conf", corefile})
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "AUTOMEMLIMIT=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(append(cmd.Env, runMainEnv+"=1"), tc.env...)
			logPath := filepath.Join(t.TempDir(), "log")
			log, err := os.Create(logPath)
			require.NoError(t, err)
			defer log.Close()
			cmd.Stdout, cmd.Stderr = log, log
			output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { cancel(); <-exited })

			var got float64
			var died error
			require.Eventually(t, func() bool {
				select {
				case err := <-exited:
					exited <- err
					died = fmt.Errorf("coredns-mc exited: %v", err)
					return true
				default:
				}
				v, found, err := harness.ScrapeMetric("http://"+metrics+"/metrics", "go_gc_gomemlimit_bytes", nil)
				got = v
				return err == nil && found
			}, 30*time.Second, 50*time.Millisecond, "no go_gc_gomemlimit_bytes from coredns-mc")
			require.NoError(t, died, output())
			assert.Equal(t, tc.want, got, "go_gc_gomemlimit_bytes\n%s", output())
		})
	}
}

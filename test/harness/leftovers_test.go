package harness_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// test/tools/leftovers.sh, which gotest.sh runs after the tests, names a
// process the harness started only while that process runs: not another
// process that has since been given its PID (a run starts tens of thousands
// of processes, and PIDs wrap), nor one that has ended.
func TestLeftoversScript(t *testing.T) {
	live := env.StartProcess(t, "test/sleeper", nil, "sleep", "300")
	gone := env.StartProcess(t, "test/gone", nil, "true")
	<-gone.Done()

	// This test binary stands for a process that now holds the PID of one
	// the harness started long ago: same PID, another start time.
	pidfile := filepath.Join(t.TempDir(), "pids")
	lines := fmt.Sprintf("%d %d %s\n%d %d %s\n%d %d %s\n",
		live.PID, live.StartTime, live.Name,
		os.Getpid(), live.StartTime+1, "test/reused",
		gone.PID, gone.StartTime, gone.Name)
	require.NoError(t, os.WriteFile(pidfile, []byte(lines), 0o644))

	out, err := exec.Command("../tools/leftovers.sh", pidfile).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 1, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("test/sleeper (pid %d) still running", live.PID))
	assert.NotContains(t, string(out), "test/reused")
	assert.NotContains(t, string(out), "test/gone")
	<-live.Done() // killed by the script
}

package harness

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PortsChildEnv, set to n, makes the harness's test binary another harness
// process that holds n ports (its TestMain).
const PortsChildEnv = "MCMIRROR_HARNESS_PORTS_CHILD"

// A port that one harness process handed out is no other's while that
// process runs, and free again once it is gone: test packages run side by
// side pick from the same window.
func TestPortsClaimedAcrossProcesses(t *testing.T) {
	const n = 200
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), PortsChildEnv+"="+strconv.Itoa(n))
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	require.NoError(t, err)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill() })
	var theirs []int
	for sc := bufio.NewScanner(out); len(theirs) < n && sc.Scan(); {
		p, err := strconv.Atoi(sc.Text())
		require.NoError(t, err)
		theirs = append(theirs, p)
	}
	require.Len(t, theirs, n, "the other process's ports")
	for _, p := range theirs {
		assert.False(t, claim(p), "port %d, held by the other process, claimed here too", p)
	}
	in.Close()
	require.NoError(t, child.Wait())
	for _, p := range theirs {
		assert.True(t, claim(p), "port %d still held after the other process ended", p)
	}
}

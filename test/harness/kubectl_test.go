package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestKubectlOutputWithoutItsOwnLogLines: a line kubectl logs of itself
// while `kubectl exec` runs (seen on 2026-11-27: a websocket stream it
// discarded) is not part of the command's output; a line the command
// printed in the klog format, from another process, is.
func TestKubectlOutputWithoutItsOwnLogLines(t *testing.T) {
	out := "E1127 23:14:38.745213   30507 websocket.go:296] Unknown stream id 1, discarding message\nunreachable\n"
	assert.Equal(t, "unreachable\n", withoutLogLines(out, 30507))
	other := "W1127 23:14:38.745213       1 reflector.go:10] from the pod\nunreachable"
	assert.Equal(t, other, withoutLogLines(other, 30507))
	assert.Equal(t, "", withoutLogLines("", 30507))
}

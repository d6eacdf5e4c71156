package harness

import (
	"testing"
)

// RequireAlive fails t at once if one of procs has exited, or if a process
// of the environment itself (etcd, an API server, kube-controller-manager,
// KWOK) has exited without being stopped. A check that something did not
// happen calls it after waiting for evidence the work was seen and before
// asserting the absence: a crashed process does nothing, which must not
// pass for correct behaviour.
func (e *Env) RequireAlive(t testing.TB, procs ...*Process) {
	t.Helper()
	for _, p := range procs {
		if p == nil {
			t.Fatal("harness: RequireAlive of a nil process")
		}
		if done, err := p.Exited(); done {
			t.Fatalf("%s (pid %d) has exited (%v); last lines:\n%s", p.Name, p.PID, err, p.Tail(30))
		}
	}
	if p := e.exited(); p != nil {
		t.Fatalf("%s (pid %d) of the environment has exited (%v); last lines:\n%s", p.Name, p.PID, p.err, p.Tail(30))
	}
}

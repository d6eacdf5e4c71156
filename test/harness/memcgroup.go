package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MemoryCgroup is a memory cgroup of its own for one process of a test, with
// a limit, as a container's limits.memory gives it: the kernel reclaims
// and then kills the process (OOM) at the limit, and the cgroup records the
// peak and any kill. cgroup v1 (memory hierarchy) and v2 are both handled.
type MemoryCgroup struct {
	// Dir is the cgroup's directory.
	Dir string
	// Limit is its memory limit in bytes.
	Limit int64
	v2    bool
}

// NewMemoryCgroup makes a memory cgroup named /mcm<pid>-<name> (the
// prefix real-node runs sweep when the run that made it is dead) with the
// given limit.
func NewMemoryCgroup(name string, limit int64) (*MemoryCgroup, error) {
	base := fmt.Sprintf("mcm%d-%s", os.Getpid(), strings.ReplaceAll(name, "/", "-"))
	m := &MemoryCgroup{Limit: limit}
	limitFile := "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		m.v2, limitFile = true, "memory.max"
		m.Dir = filepath.Join("/sys/fs/cgroup", base)
	} else {
		m.Dir = filepath.Join("/sys/fs/cgroup/memory", base)
	}
	sweepDeadMemoryCgroups(filepath.Dir(m.Dir))
	if err := os.Mkdir(m.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(m.Dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = m.Remove()
		return nil, fmt.Errorf("memory cgroup %s: %w", m.Dir, err)
	}
	return m, nil
}

// Wrap returns argv run inside the cgroup: a shell that joins it and then
// execs argv, so the process is in the cgroup from its first instruction
// and keeps the shell's PID.
func (m *MemoryCgroup) Wrap(argv []string) []string {
	return append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, m.Dir}, argv...)
}

// MemoryStats is what a memory cgroup recorded.
type MemoryStats struct {
	// Peak is the most memory charged to the cgroup at once, in bytes.
	Peak int64
	// OOMKills is how many of its processes the kernel killed at the limit.
	OOMKills int64
}

// Stats reads the peak and the OOM kills.
func (m *MemoryCgroup) Stats() (MemoryStats, error) {
	peakFile, eventsFile := "memory.max_usage_in_bytes", "memory.oom_control"
	if m.v2 {
		peakFile, eventsFile = "memory.peak", "memory.events"
	}
	var s MemoryStats
	b, err := os.ReadFile(filepath.Join(m.Dir, peakFile))
	if err != nil {
		return s, err
	}
	if s.Peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return s, fmt.Errorf("%s: %w", peakFile, err)
	}
	if b, err = os.ReadFile(filepath.Join(m.Dir, eventsFile)); err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			s.OOMKills, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return s, err
		}
	}
	return s, errors.New(eventsFile + " has no oom_kill line (a kernel older than 4.13)")
}

// Remove kills whatever is left in the cgroup and removes it.
func (m *MemoryCgroup) Remove() error {
	if err := emptyCgroup(m.Dir); err != nil {
		return err
	}
	if err := os.Remove(m.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// sweepDeadMemoryCgroups removes the memory cgroups of runs that were
// killed before they could (named mcm<pid>-..., pid no longer alive).
func sweepDeadMemoryCgroups(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && deadRun(e.Name()) {
			old := filepath.Join(dir, e.Name())
			if emptyCgroup(old) == nil {
				_ = os.Remove(old)
			}
		}
	}
}

package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 5 * time.Second

// Process is a child process started by the harness. Its output goes to a log
// file, and it is always stopped: by Stop, by the cleanup of the test that
// started it, or by the kernel when the test binary dies (Pdeathsig).
type Process struct {
	// Name says what the process is, e.g. "west/kube-apiserver".
	Name string
	// LogPath holds the process's stdout and stderr.
	LogPath string
	// PID of the process.
	PID int
	// StartTime is the process's start time in clock ticks since boot
	// (field 22 of /proc/PID/stat): with PID it names this process alone,
	// even after its PID is reused.
	StartTime uint64

	cmd      *exec.Cmd
	done     chan struct{} // closed once the process has exited
	err      error         // exit status; read after done is closed
	stopOnce sync.Once
	stopping atomic.Bool // set by Stop: an exit after it is no failure
	critical bool        // part of the environment: its exit is a failure
}

// spawnc carries process starts to one goroutine locked to its OS thread for
// the life of the test binary. Pdeathsig is delivered when the thread that
// forked a child dies, not the process; starting every child from a thread
// that never exits makes "the test binary died" the only trigger.
var spawnc = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked, on purpose
		for f := range spawnc {
			f()
		}
	}()
}

// startProcess starts argv with its output in logPath. env is added to the
// test binary's environment.
func startProcess(name, logPath string, env []string, argv ...string) (*Process, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: no command", name)
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy once started
	fmt.Fprintf(logf, "### %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // Stop signals the whole group
		Pdeathsig: syscall.SIGKILL, // no orphan outlives the test binary
	}
	errc := make(chan error, 1)
	spawnc <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	// Not reaped until Wait below, so /proc still has it, zombie or not.
	if p.StartTime, err = startTime(p.PID); err != nil {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group, waits up to stopGrace, then sends
// SIGKILL, and returns once the process has exited. It is safe to call more
// than once and from several goroutines.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		p.stopping.Store(true)
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			<-p.done
		}
		// Children that left the group or ignored SIGTERM: the group is gone
		// only when nothing in it answers signal 0.
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	})
	<-p.done
}

// Signal sends sig to the process alone (not its group), e.g. SIGKILL to
// simulate a crash.
func (p *Process) Signal(sig syscall.Signal) error { return syscall.Kill(p.PID, sig) }

// Tail returns at most n last lines of the process's log.
func (p *Process) Tail(n int) string { return tailFile(p.LogPath, 0, n) }

// Log is what the process has logged so far. t may be a *testing.T or,
// inside EventuallyWithT, the collector.
func (p *Process) Log(t require.TestingT) string {
	b, err := os.ReadFile(p.LogPath)
	require.NoError(t, err)
	return string(b)
}

// LogLines are the lines of the process's log that contain every one of
// parts.
func (p *Process) LogLines(t require.TestingT, parts ...string) []string {
	var out []string
	for line := range strings.SplitSeq(p.Log(t), "\n") {
		if !slices.ContainsFunc(parts, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

// statFields returns the fields of /proc/PID/stat from the state on (field
// 3, then 4, ...). The command name before them may hold spaces and
// parentheses, so they are counted after its last ')'.
func statFields(pid int) ([]string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(stat[i+1:])), nil
}

// startTime reads the start time of pid, in clock ticks since boot: field
// 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	fields, err := statFields(pid)
	if err != nil {
		return false
	}
	return len(fields) == 0 || fields[0] != "Z"
}

// tailFile returns the last n lines of path from byte offset from on.
func tailFile(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	ring := make([]string, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, sc.Text())
	}
	return strings.Join(ring, "\n")
}

// fileSize is the size of path, 0 when it does not exist.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Package proc holds what the benchmark commands share about processes:
// starting and stopping their children, the log files those write, the
// figures read from /proc, and the run of a command around the test harness.
package proc

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process in its own process group, killed by the kernel
// should the benchmark die (Pdeathsig, from a thread that never exits).
type Proc struct {
	Name string // the name given to Start
	Log  string // the file its output is appended to

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

var spawnc = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: Pdeathsig follows the forking thread
		for f := range spawnc {
			f()
		}
	}()
}

// procs is every process Start started, for the final cleanup.
var (
	procsMu sync.Mutex
	procs   []*Proc
)

// Start runs argv, with env added to this process's environment, in its own
// process group, with its output appended to logPath after a line that
// names the time and the command.
func Start(name, logPath string, env []string, argv ...string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "### %s %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawnc <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

// PID is the process's ID, which is also its process group's.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is what waiting for the process returned once it has exited, and nil
// while it runs.
func (p *Proc) Err() error {
	if p.Exited() {
		return p.err
	}
	return nil
}

// WaitHTTP waits until url answers 200 OK, for at most limit, and fails at
// once if the process exits.
func (p *Proc) WaitHTTP(url string, limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		if p.Exited() {
			return fmt.Errorf("exited: %v", p.Err())
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after 5 s, and
// returns once the process has exited.
func (p *Proc) Stop() {
	p.once.Do(func() {
		pid := p.cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-p.done
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
	<-p.done
}

// StopAll stops every process Start started, the latest first.
func StopAll() {
	procsMu.Lock()
	ps := slices.Clone(procs)
	procsMu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop()
	}
}

// AppendLog appends s to the file at path, creating it and its directory if
// need be; a failure is ignored.
func AppendLog(path, s string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(s)
}

// Tail returns the last n lines of the file at path, or the error reading it.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

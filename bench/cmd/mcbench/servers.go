package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// proc is a child process in its own process group, killed by the kernel
// should mcbench die (Pdeathsig, from a thread that never exits).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
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

// procs is every process mcbench started, for the final cleanup.
var (
	procsMu sync.Mutex
	procs   []*proc
)

func start(name, logPath string, env []string, argv ...string) (*proc, error) {
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
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the group, then SIGKILL after 5s.
func (p *proc) stop() {
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

func stopAll() {
	procsMu.Lock()
	ps := slices.Clone(procs)
	procsMu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].stop()
	}
}

func tail(path string, n int) string {
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

// freePort returns a port free for both UDP and TCP on 127.0.0.1.
func freePort() int {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	panic("no free port")
}

// server is a DNS server under test, pinned to the server core.
type server struct {
	key    string // A10, A1, B, C, D, ...
	what   string // description for the table
	port   int
	ready  string // the ready plugin's URL; empty for D
	pprof  string // the pprof plugin's base URL; empty when off
	proc   *proc
	expect names
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// serverOpts describe how a server process runs.
type serverOpts struct {
	key, what string
	bin       string   // binary
	args      []string // arguments; {CONF} is replaced by the Corefile path
	corefile  string   // with {PORT}, {READY} and {PPROF}; empty for D
	cpu       string   // taskset CPU list; empty: not pinned
	expect    names
	pprof     bool
}

// startServer starts a server and waits until it answers every expected
// name correctly.
func startServer(dir string, o serverOpts) (*server, error) {
	s := &server{key: o.key, what: o.what, port: freePort(), expect: o.expect}
	args := slices.Clone(o.args)
	if o.corefile != "" {
		rp, pp := freePort(), freePort()
		s.ready = fmt.Sprintf("http://127.0.0.1:%d/ready", rp)
		pprofLine := ""
		if o.pprof {
			pprofLine = fmt.Sprintf("pprof 127.0.0.1:%d", pp)
			s.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pp)
		}
		cf := strings.NewReplacer("{PORT}", strconv.Itoa(s.port), "{READY}", strconv.Itoa(rp), "{PPROF}", pprofLine).Replace(o.corefile)
		path := filepath.Join(dir, "Corefile."+o.key)
		if err := os.WriteFile(path, []byte(cf), 0o644); err != nil {
			return nil, err
		}
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "{CONF}", path)
		}
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "{PORT}", strconv.Itoa(s.port))
	}
	argv := append([]string{o.bin}, args...)
	env := []string{}
	if o.cpu != "" {
		argv = append([]string{"taskset", "-c", o.cpu}, argv...)
		env = append(env, "GOMAXPROCS=1")
	}
	var err error
	s.proc, err = start(o.key, filepath.Join(dir, "logs", o.key+".log"), env, argv...)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(90 * time.Second); err != nil {
		s.proc.stop()
		return nil, fmt.Errorf("%s: %w\n%s", o.key, err, tail(s.proc.log, 30))
	}
	return s, nil
}

// waitReady waits until the ready plugin says 200 and every expected name
// answers correctly.
func (s *server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	if s.ready != "" {
		for {
			if s.proc.exited() {
				return fmt.Errorf("exited: %v", s.proc.err)
			}
			resp, err := http.Get(s.ready)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return errors.New("not ready in time")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var last error
	for {
		if s.proc.exited() {
			return fmt.Errorf("exited: %v", s.proc.err)
		}
		if last = s.verify(s.expect.sorted(), 8); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("answers not correct in time: %w", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verify asks for the A records of each name (over UDP, with workers
// concurrent clients) and checks the answer is NOERROR with exactly the
// expected addresses.
func (s *server) verify(list []string, workers int) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	ch := make(chan string)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			for name := range ch {
				if err := check(c, s.addr(), name, s.expect[name]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range list {
		ch <- n
	}
	close(ch)
	wg.Wait()
	return first
}

func check(c *dns.Client, addr, name string, want []string) error {
	got, rcode, err := askA(c, addr, name)
	if err != nil {
		return err
	}
	if rcode != dns.RcodeSuccess {
		return fmt.Errorf("%s: %s, want NOERROR", name, dns.RcodeToString[rcode])
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: %v, want %v", name, got, want)
	}
	return nil
}

// askA returns the sorted A addresses of the answer and its rcode.
func askA(c *dns.Client, addr, name string) ([]string, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	var got []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	slices.Sort(got)
	return got, r.Rcode, nil
}

// heap forces a GC through the pprof plugin and returns the runtime's
// HeapInuse and HeapAlloc after it, and the process's RSS.
func (s *server) heap(ctx context.Context) (inuse, alloc, rss int64, err error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", s.pprof+"/heap?gc=1&debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, 0, err
	}
	inuse = memstat(body, "HeapInuse")
	alloc = memstat(body, "HeapAlloc")
	if inuse == 0 || alloc == 0 {
		return 0, 0, 0, fmt.Errorf("no MemStats in the heap profile")
	}
	rss, err = vmRSS(s.goPID())
	return inuse, alloc, rss, err
}

// goPID is the PID of the server itself: taskset execs it, so the same PID.
func (s *server) goPID() int { return s.proc.pid() }

func memstat(body []byte, key string) int64 {
	m := regexp.MustCompile(`(?m)^# ` + key + ` = (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0, errors.New("no VmRSS")
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n * 1024, nil
}

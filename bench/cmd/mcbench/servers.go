package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
)

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
	proc   *proc.Proc
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
	s.proc, err = proc.Start(o.key, filepath.Join(dir, "logs", o.key+".log"), env, argv...)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(90 * time.Second); err != nil {
		s.proc.Stop()
		return nil, fmt.Errorf("%s: %w\n%s", o.key, err, proc.Tail(s.proc.Log, 30))
	}
	return s, nil
}

// waitReady waits until the ready plugin says 200 and every expected name
// answers correctly.
func (s *server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	if s.ready != "" {
		if err := s.proc.WaitHTTP(s.ready, limit); err != nil {
			return err
		}
	}
	var last error
	for {
		if s.proc.Exited() {
			return fmt.Errorf("exited: %v", s.proc.Err())
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
		wg.Go(func() {
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
		})
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
// HeapInuse and HeapAlloc after it, and the process's RSS (taskset execs
// the server: the same PID).
func (s *server) heap(timeout time.Duration) (inuse, alloc, rss int64, err error) {
	if inuse, alloc, err = proc.HeapStats(s.pprof, timeout); err != nil {
		return 0, 0, 0, err
	}
	rss, err = proc.RSS(s.proc.PID())
	return inuse, alloc, rss, err
}

package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/stats"
)

// The load generator, `gwbench client`, pinned to the client CPU beside the
// target. It prints one JSON clientResult on stdout (idle mode: two).

// clientResult is what one client run measured.
type clientResult struct {
	Mode     string  `json:"mode"`
	Seconds  float64 `json:"seconds"`         // wall time of the run
	Bytes    int64   `json:"bytes,omitempty"` // bulk: bytes the target counted, all streams
	Conns    int64   `json:"conns,omitempty"` // connrate: completed connections; idle: open ones
	Errors   int64   `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
	// rr: round-trip times in microseconds.
	N   int     `json:"n,omitempty"`
	P50 float64 `json:"p50,omitempty"`
	P99 float64 `json:"p99,omitempty"`
}

func (r *clientResult) fail(err error) {
	r.Errors++
	if r.FirstErr == "" {
		r.FirstErr = err.Error()
	}
}

func runClientCmd(args []string) int {
	fs := flag.NewFlagSet("gwbench client", flag.ContinueOnError)
	mode := fs.String("mode", "", "bulk, rr, connrate or idle")
	addr := fs.String("addr", "", "host:port to connect to")
	streams := fs.Int("streams", 1, "bulk: parallel streams; connrate: concurrent connections")
	dur := fs.Duration("duration", 3*time.Second, "length of the run (bulk: of the sending)")
	size := fs.Int("size", 64, "request size of rr, connrate and idle")
	n := fs.Int("n", 2000, "idle: connections to open")
	if err := fs.Parse(args); err != nil || *addr == "" {
		return 2
	}
	var r clientResult
	switch *mode {
	case "bulk":
		r = bulk(*addr, *streams, *dur)
	case "rr":
		r = roundTrips(*addr, *size, *dur)
	case "connrate":
		r = connRate(*addr, *streams, *size, *dur)
	case "idle":
		r = idle(*addr, *n, *size)
	default:
		fmt.Fprintf(os.Stderr, "gwbench client: unknown -mode %q\n", *mode)
		return 2
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func dial(addr string) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// bulk sends for dur on each of streams connections to a sink, half-closes,
// and reads back how many bytes the target counted: throughput is what
// arrived, over the time until the last count came back.
func bulk(addr string, streams int, dur time.Duration) clientResult {
	r := clientResult{Mode: "bulk"}
	chunk := make([]byte, 64<<10)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(chunk)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		last time.Time
	)
	start := time.Now()
	deadline := start.Add(dur)
	for range streams {
		wg.Go(func() {
			got, err := bulkStream(addr, chunk, deadline)
			end := time.Now()
			mu.Lock()
			defer mu.Unlock()
			r.Bytes += got
			if err != nil {
				r.fail(err)
			}
			if end.After(last) {
				last = end
			}
		})
	}
	wg.Wait()
	r.Seconds = last.Sub(start).Seconds()
	return r
}

func bulkStream(addr string, chunk []byte, deadline time.Time) (int64, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var sent int64
	for time.Now().Before(deadline) {
		n, err := c.Write(chunk)
		sent += int64(n)
		if err != nil {
			return 0, fmt.Errorf("write after %d bytes: %w", sent, err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var cnt [8]byte
	if _, err := io.ReadFull(c, cnt[:]); err != nil {
		return 0, fmt.Errorf("reading the count after %d bytes: %w", sent, err)
	}
	got := int64(binary.BigEndian.Uint64(cnt[:]))
	if got != sent {
		return got, fmt.Errorf("the target counted %d bytes of %d sent", got, sent)
	}
	return got, nil
}

// roundTrips sends size bytes and waits for their echo, again and again on
// one connection, and returns the distribution of the round trips (after
// 200 not counted).
func roundTrips(addr string, size int, dur time.Duration) clientResult {
	r := clientResult{Mode: "rr"}
	c, err := dial(addr)
	if err != nil {
		r.fail(err)
		return r
	}
	defer c.Close()
	req, resp := payload(size), make([]byte, size)
	_ = c.SetDeadline(time.Now().Add(dur + 30*time.Second))
	for range 200 {
		if _, err := echo(c, req, resp); err != nil {
			r.fail(err)
			return r
		}
	}
	samples := make([]float64, 0, 1<<16)
	start := time.Now()
	for deadline := start.Add(dur); time.Now().Before(deadline); {
		d, err := echo(c, req, resp)
		if err != nil {
			r.fail(err)
			return r
		}
		samples = append(samples, float64(d.Nanoseconds())/1e3)
	}
	r.Seconds = time.Since(start).Seconds()
	_ = c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) > 0 {
		r.fail(fmt.Errorf("end of the echo stream: %d bytes more, %v", len(rest), err))
	}
	slices.Sort(samples)
	r.N = len(samples)
	r.P50, r.P99 = stats.Rank(samples, 0.5), stats.Rank(samples, 0.99)
	return r
}

// echo writes req on c and reads its echo into resp; it returns the time
// from the write to the echo's last byte (the check of the echo not
// counted).
func echo(c net.Conn, req, resp []byte) (time.Duration, error) {
	t := time.Now()
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, resp); err != nil {
		return 0, err
	}
	d := time.Since(t)
	if !bytes.Equal(req, resp) {
		return 0, errors.New("echo differs from the request")
	}
	return d, nil
}

func payload(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// connRate opens connections to a once port from conc workers for dur:
// each a new connection, one request, its answer, the server's close.
func connRate(addr string, conc, size int, dur time.Duration) clientResult {
	r := clientResult{Mode: "connrate"}
	req := payload(size)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for range conc {
		wg.Go(func() {
			resp := make([]byte, size+1)
			var ok int64
			var errs []error
			for time.Now().Before(deadline) {
				if err := once(addr, req, resp); err != nil {
					errs = append(errs, err)
					if len(errs) > 1000 {
						break // something is broken; stop hammering
					}
					continue
				}
				ok++
			}
			mu.Lock()
			defer mu.Unlock()
			r.Conns += ok
			for _, err := range errs {
				r.fail(err)
			}
		})
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	return r
}

// once is one connection of connRate; resp has room for one byte more than
// the answer, to tell that the server closed right after it.
func once(addr string, req, resp []byte) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(req); err != nil {
		return err
	}
	n, err := io.ReadFull(c, resp)
	if n != len(req) || !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("answer of %d bytes (%v), want %d and the server's close", n, err, len(req))
	}
	if !bytes.Equal(resp[:n], req) {
		return errors.New("answer differs from the request")
	}
	return nil
}

// idle opens n connections to an echo port, 16 at a time, each with one
// round trip so that it is established end to end, and prints a first
// result ("idle-ready"). It then holds them until stdin ends, checks that
// every one still echoes, and closes them.
func idle(addr string, n, size int) clientResult {
	r := clientResult{Mode: "idle"}
	req := payload(size)
	conns := make([]*net.TCPConn, n)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	next := make(chan int)
	rt := func(c *net.TCPConn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := echo(c, req, make([]byte, size))
		return err
	}
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for i := range next {
				c, err := dial(addr)
				if err == nil {
					if err = rt(c); err != nil {
						c.Close()
					}
				}
				mu.Lock()
				if err != nil {
					r.fail(err)
				} else {
					conns[i] = c
					r.Conns++
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	ready := r
	ready.Mode = "idle-ready"
	_ = json.NewEncoder(os.Stdout).Encode(ready)
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	// Still there, all of them?
	for _, c := range conns {
		if c == nil {
			continue
		}
		if err := rt(c); err != nil {
			r.fail(fmt.Errorf("after the hold: %w", err))
		}
		c.Close()
	}
	return r
}

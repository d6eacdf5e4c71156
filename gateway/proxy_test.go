package gateway

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prng is a deterministic pseudo-random byte stream (AES-CTR over zeros:
// fast, even under the race detector, which does not instrument assembly).
func prng(seed byte) io.Reader {
	key := make([]byte, 16)
	key[0] = seed
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	return cipher.StreamReader{S: cipher.NewCTR(block, make([]byte, aes.BlockSize)), R: zeros{}}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func randomBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(prng(seed), b)
	return b
}

// Bytes go both ways through egress → ingress to an echo server, intact,
// and the client's half-close ends the echo.
func TestEchoBothWays(t *testing.T) {
	p := newPair(t)
	echo := startEcho(t, "hello from west\n")
	port := p.serveWeb(t, echo.addr)

	egressSent := value(bytesTotal.WithLabelValues("west", DirectionEgress, "sent"))
	egressReceived := value(bytesTotal.WithLabelValues("west", DirectionEgress, "received"))
	ingressSent := value(bytesTotal.WithLabelValues("east", DirectionIngress, "sent"))
	ingressReceived := value(bytesTotal.WithLabelValues("east", DirectionIngress, "received"))
	egressConns := value(connsTotal.WithLabelValues("west", DirectionEgress))
	ingressConns := value(connsTotal.WithLabelValues("east", DirectionIngress))

	c := dialEgress(t, port)
	readGreeting(t, c, "hello from west\n")
	assert.Equal(t, 1.0, value(connsOpen.WithLabelValues("west", DirectionEgress)))
	assert.Equal(t, 1.0, value(connsOpen.WithLabelValues("east", DirectionIngress)))
	payload := randomBytes(1, 3<<20)
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.CloseWrite()
		}
		sent <- err
	}()
	got := readAll(t, c, 30*time.Second)
	require.NoError(t, <-sent)
	require.True(t, bytes.Equal(payload, got), "echo differs: sent %d bytes, got %d", len(payload), len(got))
	assert.Equal(t, 1, echo.count())

	// Counted on both sides, by peer cluster and direction: the stream,
	// and its bytes each way.
	require.Eventually(t, func() bool {
		return value(connsOpen.WithLabelValues("west", DirectionEgress)) == 0 && value(connsOpen.WithLabelValues("east", DirectionIngress)) == 0
	}, 5*time.Second, 5*time.Millisecond, "the stream closed on both sides")
	assert.Equal(t, egressConns+1, value(connsTotal.WithLabelValues("west", DirectionEgress)))
	assert.Equal(t, ingressConns+1, value(connsTotal.WithLabelValues("east", DirectionIngress)))
	up, down := float64(len(payload)), float64(len("hello from west\n")+len(payload))
	assert.Equal(t, egressSent+up, value(bytesTotal.WithLabelValues("west", DirectionEgress, "sent")))
	assert.Equal(t, egressReceived+down, value(bytesTotal.WithLabelValues("west", DirectionEgress, "received")))
	assert.Equal(t, ingressSent+up, value(bytesTotal.WithLabelValues("east", DirectionIngress, "sent")))
	assert.Equal(t, ingressReceived+down, value(bytesTotal.WithLabelValues("east", DirectionIngress, "received")))
}

// A stream that breaks at one end reaches the other as a reset, never as
// an orderly end that would pass a truncated stream for a whole one.
func TestResetPassesThrough(t *testing.T) {
	p := newPair(t)
	targetErr := make(chan error, 1)
	target := startServer(t, func(c net.Conn) {
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			targetErr <- err
			return
		}
		if string(b) == "kill" { // reset the client
			_, _ = io.WriteString(c, "partial")
			_ = c.(*net.TCPConn).SetLinger(0)
			return // closed by the server
		}
		_, _ = io.WriteString(c, "ok") // then wait for the client's reset
		_, err := io.Copy(io.Discard, c)
		targetErr <- err
	})
	port := p.serveWeb(t, target.addr)

	t.Run("target resets", func(t *testing.T) {
		c := dialEgress(t, port)
		_, err := io.WriteString(c, "kill")
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		assert.True(t, strings.HasPrefix("partial", string(got)), "got %q", got)
		require.Error(t, err, "the client saw an orderly end")
		assert.ErrorIs(t, err, syscall.ECONNRESET)
	})

	t.Run("client resets", func(t *testing.T) {
		c := dialEgress(t, port)
		_, err := io.WriteString(c, "live")
		require.NoError(t, err)
		readGreeting(t, c, "ok")
		require.NoError(t, c.SetLinger(0))
		require.NoError(t, c.Close())
		err = within(t, targetErr, 10*time.Second, "the target never saw the client go")
		require.Error(t, err, "the target saw an orderly end")
		assert.ErrorIs(t, err, syscall.ECONNRESET)
	})
}

// A real HTTP client reaches a net/http server through the egress port:
// request and response bodies intact, several requests on one kept-alive
// connection.
func TestHTTPThroughEgress(t *testing.T) {
	p := newPair(t)
	respBody := randomBytes(2, 1<<20)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Request-Sha256", fmt.Sprintf("%d:%x", n, h.Sum(nil)))
		_, _ = w.Write(respBody)
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	port := p.serveWeb(t, netip.MustParseAddrPort(srv.Listener.Addr().String()))

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := "http://127.0.0.1:" + strconv.Itoa(int(port)) + "/upload"
	for i := range 3 {
		body := randomBytes(byte(10+i), 512<<10+i)
		resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(body))
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, fmt.Sprintf("%d:%x", len(body), sha256.Sum256(body)), resp.Header.Get("X-Request-Sha256"), "request %d", i)
		require.True(t, bytes.Equal(respBody, got), "response %d differs", i)
	}
	tr.CloseIdleConnections()
	assert.EqualValues(t, 1, conns.Load(), "the three requests should share one kept-alive connection")
}

// The client half-closes: the target sees EOF, and can still answer, and
// the client reads the whole answer.
func TestHalfCloseFromClient(t *testing.T) {
	p := newPair(t)
	target := startServer(t, func(c net.Conn) {
		h := sha256.New()
		n, err := io.Copy(h, c) // until the client's half-close
		if err != nil {
			return
		}
		// Answer after EOF, in pieces, slowly enough that the reply
		// crosses the tunnel after the close passed through it.
		fmt.Fprintf(c, "got %d bytes\n", n)
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintf(c, "sha256 %x\n", h.Sum(nil))
	})
	port := p.serveWeb(t, target.addr)

	c := dialEgress(t, port)
	payload := randomBytes(3, 100000)
	_, err := c.Write(payload)
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	got := readAll(t, c, 10*time.Second)
	assert.Equal(t, fmt.Sprintf("got %d bytes\nsha256 %x\n", len(payload), sha256.Sum256(payload)), string(got))
}

// The target half-closes: the client sees EOF, and can still send, and the
// target receives what it sends.
func TestHalfCloseFromTarget(t *testing.T) {
	p := newPair(t)
	received := make(chan string, 1)
	target := startServer(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "bye from west")
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			received <- "CloseWrite: " + err.Error()
			return
		}
		b, err := io.ReadAll(c)
		if err != nil {
			received <- "read: " + err.Error()
			return
		}
		received <- string(b)
	})
	port := p.serveWeb(t, target.addr)

	c := dialEgress(t, port)
	got := readAll(t, c, 10*time.Second) // ends with the target's half-close
	require.Equal(t, "bye from west", string(got))
	// Well after the EOF, the way to the target is still open.
	for i := range 3 {
		_, err := fmt.Fprintf(c, "still here %d;", i)
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, c.CloseWrite())
	msg := within(t, received, 10*time.Second, "the target never saw the client's bytes and half-close")
	assert.Equal(t, "still here 0;still here 1;still here 2;", msg)
}

// startHashSink is a target that reads until the client's half-close and
// answers with the number of bytes it read and their SHA-256.
func startHashSink(t *testing.T) *server {
	return startServer(t, func(c net.Conn) {
		h := sha256.New()
		n, err := io.CopyBuffer(h, c, make([]byte, 256<<10))
		if err != nil {
			fmt.Fprintf(c, "error after %d bytes: %v", n, err)
			return
		}
		fmt.Fprintf(c, "%d %x", n, h.Sum(nil))
	})
}

// One gigabyte crosses egress → ingress intact: the target hashes what it
// receives and the client compares with what it sent.
func TestGigabyteIntact(t *testing.T) {
	const size = 1 << 30
	p := newPair(t)
	port := p.serveWeb(t, startHashSink(t).addr)

	c := dialEgress(t, port)
	h := sha256.New()
	start := time.Now()
	n, err := io.CopyBuffer(io.MultiWriter(c, h), io.LimitReader(prng(4), size), make([]byte, 256<<10))
	require.NoError(t, err)
	require.EqualValues(t, size, n)
	require.NoError(t, c.CloseWrite())
	answer := readAll(t, c, 60*time.Second)
	elapsed := time.Since(start)
	assert.Equal(t, fmt.Sprintf("%d %x", size, h.Sum(nil)), string(answer))
	t.Logf("1 GiB through egress and ingress in %v (%.0f MB/s)", elapsed.Round(time.Millisecond), float64(size)/elapsed.Seconds()/1e6)
}

// A stream with no traffic either way for IdleTimeout is ended, at both
// ends.
func TestIdleTimeoutEndsIdleStream(t *testing.T) {
	p := newPair(t, func(in *Ingress, eg *Egress) {
		in.IdleTimeout = 300 * time.Millisecond
		eg.IdleTimeout = 300 * time.Millisecond
	})
	ended := greetThenRead(t, p)
	port := p.mirror(t, "web", "", 80)

	c := dialEgress(t, port)
	readGreeting(t, c, "hi")
	// Nothing more is sent either way: the gateway must end the stream.
	requireEndedBothEnds(t, c, ended)
}

// greetThenRead makes web's target a server that says "hi" and then reads
// until its connection ends, and returns where that end is reported.
func greetThenRead(t *testing.T, p *pair) <-chan error {
	t.Helper()
	ended := make(chan error, 1)
	target := startServer(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "hi")
		_, err := io.Copy(io.Discard, c)
		ended <- err
	})
	p.resolver.set(web, target.addr)
	return ended
}

// requireEndedBothEnds requires that the gateway ends the stream the client
// c holds, and the target's connection (ended, from greetThenRead), within
// 10 s each.
func requireEndedBothEnds(t *testing.T, c net.Conn, ended <-chan error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err)
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the client's stream was never ended")
	within(t, ended, 10*time.Second, "the target's connection was never ended")
}

// A stream with traffic in one direction only is not idle: it outlives
// several idle timeouts, and answers at the end. A byte goes every
// idle/20, so that a loaded machine's scheduling delays do not make a
// real idle gap.
func TestOneWayTrafficIsNotIdle(t *testing.T) {
	const idle, gap = time.Second, 50 * time.Millisecond
	p := newPair(t, func(in *Ingress, eg *Egress) { in.IdleTimeout = idle; eg.IdleTimeout = idle })

	t.Run("client to target", func(t *testing.T) {
		target := startServer(t, func(c net.Conn) {
			b := make([]byte, 1)
			n := 0
			for {
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				if b[0] == '.' {
					fmt.Fprintf(c, "got %d", n)
					return
				}
				n++
			}
		})
		port := p.serveWeb(t, target.addr)
		c := dialEgress(t, port)
		deadline := time.Now().Add(3 * idle)
		n := 0
		for time.Now().Before(deadline) {
			_, err := c.Write([]byte("x"))
			require.NoError(t, err, "after %d bytes", n)
			n++
			time.Sleep(gap)
		}
		_, err := c.Write([]byte("."))
		require.NoError(t, err)
		got := readAll(t, c, 10*time.Second)
		assert.Equal(t, fmt.Sprintf("got %d", n), string(got))
	})

	t.Run("target to client", func(t *testing.T) {
		target := startServer(t, func(c net.Conn) {
			deadline := time.Now().Add(3 * idle)
			for time.Now().Before(deadline) {
				if _, err := c.Write([]byte("y")); err != nil {
					return
				}
				time.Sleep(gap)
			}
			_, _ = c.Write([]byte("."))
			// Then the client speaks, once, at the end.
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err == nil {
				_, _ = c.Write(b)
			}
		})
		p.resolver.set(Destination{Namespace: "default", Service: "feed", Port: 80}, target.addr)
		port := p.mirror(t, "feed", "", 80)
		c := dialEgress(t, port)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 1)
		n := 0
		for {
			_, err := io.ReadFull(c, b)
			require.NoError(t, err, "after %d bytes", n)
			if b[0] == '.' {
				break
			}
			n++
		}
		require.Greater(t, n, 10)
		_, err := c.Write([]byte("pong"))
		require.NoError(t, err)
		got := make([]byte, 4)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		assert.Equal(t, "pong", string(got))
	})
}

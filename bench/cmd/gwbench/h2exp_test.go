package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// The HTTP/2 experiment must carry what the gateway carries, or h2cmp's
// figures compare unlike things: echoes both ways, the client's half-close
// to the target and the target's back, more streams than one connection
// takes, and a refused destination as a failure the client sees.
func TestH2ExperimentCarries(t *testing.T) {
	dir := t.TempDir()
	ca, err := gatewaytest.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]*gateway.Certs{}
	for _, c := range []string{"east", "west"} {
		if _, err := ca.IssueFiles(dir, c, gatewaytest.Options{}); err != nil {
			t.Fatal(err)
		}
		certs[c], err = gateway.LoadCerts(gateway.CertFiles{Cert: filepath.Join(dir, c+".crt"), Key: filepath.Join(dir, c+".key"), CA: filepath.Join(dir, "ca.crt")})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// The target listens on the Service port itself (staticResolver keeps it).
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go serveEcho(c)
		}
	}()
	port := tl.Addr().(*net.TCPAddr).Port

	il, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tune := h2Tuning{maxFrame: 16 << 10}
	go h2Ingress(ctx, il, certs["west"], staticResolver{netip.MustParseAddr("127.0.0.1")}, tune)
	eg := newH2Egress(certs["east"], "west", il.Addr().String(), tune)
	egressPort := func(dest string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go eg.serve(l, dest)
		return l.Addr().String()
	}
	good := egressPort(benchSvc + "." + benchNS + ":" + strconv.Itoa(port))
	refused := egressPort("other." + benchNS + ":" + strconv.Itoa(port))

	// Echo, then the client's half-close comes back as the target's.
	exchange := func(c *net.TCPConn, msg []byte) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("echo %q, want %q", got, msg)
		}
		return nil
	}
	c, err := dial(good)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: several frames each way
	for _, msg := range [][]byte{[]byte("hello"), big} {
		if err := exchange(c, msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the client's half-close: %d bytes more, %v; want the target's end (EOF)", len(rest), err)
	}
	c.Close()

	// 300 streams open at once: more than the ingress's 250 per connection.
	conns := make([]*net.TCPConn, 300)
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(good)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
			if err := exchange(c, []byte(fmt.Sprintf("stream %d", i))); err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}

	// A destination the ingress refuses: the client's connection ends
	// without a byte.
	c, err = dial(refused)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write([]byte("hello"))
	if n, err := c.Read(make([]byte, 16)); n != 0 || err == nil {
		t.Fatalf("refused destination: read %d bytes, %v; want the connection ended", n, err)
	}
}

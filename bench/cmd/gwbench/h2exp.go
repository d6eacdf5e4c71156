package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/gateway"

	"golang.org/x/net/http2"
)

// The HTTP/2 experiment (`gwbench inproc -proto h2`, driven by `gwbench
// h2cmp`): the same egress ports and ingress as the gateway pair, but every
// client connection is one HTTP/2 CONNECT stream over one pooled mutual-TLS
// connection to the peer, as Istio's HBONE carries them. It is measured
// against the gateway's HTTP/1.1 CONNECT per connection (bench/README.md,
// "Why HTTP/1.1 CONNECT per connection"); it is not the product.

// h2Tuning is what the experiment lets one change.
type h2Tuning struct {
	maxFrame   uint32 // SETTINGS_MAX_FRAME_SIZE both sides advertise (16 KiB .. 16 MiB)
	streamWin  int32  // the ingress's receive window per stream (x/net's default 1 MiB)
	connWin    int32  // and per connection (1 MiB); the egress keeps x/net's (4 MiB, 1 GiB)
	maxStreams uint32 // streams per connection the ingress allows (x/net's default 250)
}

// h2Ingress serves HTTP/2 CONNECT streams on ln: TLS 1.3 with the
// gateway's server configuration, ALPN h2; each stream's authority is
// resolved as the ingress does, the target dialled, and the two copied both
// ways, the answer flushed after every write. (An experiment: a refusal is
// only a status, no metrics, no admission bound.)
func h2Ingress(ctx context.Context, ln net.Listener, certs *gateway.Certs, res gateway.Resolver, t h2Tuning) {
	cfg := certs.ServerConfig().Clone()
	cfg.NextProtos = []string{"h2"}
	srv := &http2.Server{
		MaxConcurrentStreams:         t.maxStreams,
		MaxReadFrameSize:             t.maxFrame,
		MaxUploadBufferPerConnection: t.connWin,
		MaxUploadBufferPerStream:     t.streamWin,
		IdleTimeout:                  0,
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d, err := gateway.ParseDestination(r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		target, reason := res.Resolve(d)
		if reason != "" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		var dl net.Dialer
		tc, err := dl.DialContext(r.Context(), "tcp", target.String())
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer tc.Close()
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		done := make(chan struct{})
		go func() {
			defer close(done)
			// target → client: each read flushed as DATA frames.
			_ = growCopy(w, tc, rc.Flush)
		}()
		if err := growCopy(tc, r.Body, nil); err == nil {
			_ = tc.(*net.TCPConn).CloseWrite()
		} else {
			tc.Close()
		}
		<-done
	})
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			tc := tls.Server(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return
			}
			srv.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: h})
		}()
	}
}

// h2Egress carries every connection accepted on an egress port as a CONNECT
// stream through a pooled HTTP/2 connection to the ingress at peerAddr: one
// connection, and a new one when it is full (the ingress's stream limit) or
// dead.
type h2Egress struct {
	peerAddr string
	tr       *http2.Transport
	tlsCfg   *tls.Config

	mu sync.Mutex
	cc *http2.ClientConn
}

func newH2Egress(certs *gateway.Certs, peer, peerAddr string, t h2Tuning) *h2Egress {
	cfg := certs.PeerConfig(peer).Clone()
	cfg.NextProtos = []string{"h2"}
	return &h2Egress{peerAddr: peerAddr, tlsCfg: cfg,
		// Not StrictMaxConcurrentStreams: a full connection must say so
		// (ReserveNewRequest false) so that conn dials another, not queue.
		tr: &http2.Transport{MaxReadFrameSize: t.maxFrame, MaxHeaderListSize: 8 << 10}}
}

// conn returns the pooled connection, or a new one when it is dead or full.
func (e *h2Egress) conn(ctx context.Context) (*http2.ClientConn, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cc != nil && e.cc.ReserveNewRequest() {
		return e.cc, nil
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", e.peerAddr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, e.tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, errors.New("peer did not negotiate h2")
	}
	cc, err := e.tr.NewClientConn(tc)
	if err != nil {
		tc.Close()
		return nil, err
	}
	e.cc = cc
	if !cc.ReserveNewRequest() {
		return nil, errors.New("new connection takes no stream")
	}
	return cc, nil
}

// bodyConn is the client connection as a request body. The transport
// closes the body when it is done with it (the client's half-close was sent
// as END_STREAM, or the stream ended): Close only says so, the connection is
// closed by handle once both directions are done.
type bodyConn struct {
	c    *net.TCPConn
	once sync.Once
	done chan struct{}
}

func (b *bodyConn) Read(p []byte) (int, error) { return b.c.Read(p) }
func (b *bodyConn) Close() error {
	b.once.Do(func() { close(b.done) })
	return nil
}

func (e *h2Egress) serve(ln net.Listener, dest string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go e.handle(c.(*net.TCPConn), dest)
	}
}

// handle carries one client connection as one stream; a failure resets the
// client. (An experiment: no metrics, refusal reasons or idle timeout.)
func (e *h2Egress) handle(client *net.TCPConn, dest string) {
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	cc, err := e.conn(ctx)
	cancel()
	if err != nil {
		_ = client.SetLinger(0)
		return
	}
	body := &bodyConn{c: client, done: make(chan struct{})}
	req := &http.Request{Method: http.MethodConnect, Host: dest, URL: &url.URL{Host: dest},
		Header: http.Header{}, Body: body, ContentLength: -1}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		_ = client.SetLinger(0)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = client.SetLinger(0)
		return
	}
	if err := growCopy(client, resp.Body, nil); err != nil {
		_ = client.SetLinger(0)
		return
	}
	_ = client.CloseWrite()
	<-body.done
}

var h2Bufs = [3]sync.Pool{}

// growCopy copies src to dst as the gateway's pump does: a 1 KiB buffer
// that grows to 16 and 256 KiB while reads fill it and goes back to 1 KiB
// after a short read; flush (if not nil) after every write.
func growCopy(dst io.Writer, src io.Reader, flush func() error) error {
	sizes := [3]int{1 << 10, 16 << 10, 256 << 10}
	class := 0
	get := func(c int) *[]byte {
		if b, ok := h2Bufs[c].Get().(*[]byte); ok {
			return b
		}
		b := make([]byte, sizes[c])
		return &b
	}
	buf := get(0)
	defer func() { h2Bufs[class].Put(buf) }()
	for {
		n, err := src.Read(*buf)
		if n > 0 {
			if _, werr := dst.Write((*buf)[:n]); werr != nil {
				return werr
			}
			if flush != nil {
				if ferr := flush(); ferr != nil {
					return ferr
				}
			}
			switch {
			case n == len(*buf) && class < 2:
				h2Bufs[class].Put(buf)
				class++
				buf = get(class)
			case n < sizes[0] && class > 0:
				h2Bufs[class].Put(buf)
				class = 0
				buf = get(0)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// h2Dests reads inproc's -egress (sp=ep,...) as Service port to listen
// address.
func h2Dests(spec string) map[string]string {
	m := map[string]string{}
	for kv := range strings.SplitSeq(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = "127.0.0.1:" + v
	}
	return m
}

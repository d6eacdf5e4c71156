package harness

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// FaultProxy stands between clients and one cluster's API server and breaks
// the path on demand: it passes requests through, hangs (accepts TCP and
// never answers the TLS handshake), or fails chosen writes with an HTTP
// status (409 Conflict, 429 Too Many Requests) as a busy API server would.
// It terminates TLS with a certificate of the environment's CA, so a
// kubeconfig pointing at it verifies as one pointing at the API server, and
// forwards every request, credentials included, over TLS to the server.
type FaultProxy struct {
	// URL is the proxy's address as a kubeconfig server, https://127.0.0.1:PORT.
	URL string
	// Kubeconfig is the path of an admin kubeconfig of the cluster whose
	// server is the proxy.
	Kubeconfig string

	cluster *Cluster
	ln      net.Listener
	srv     *http.Server
	hang    atomic.Bool

	mu     sync.Mutex
	served map[net.Conn]struct{} // connections handed to the HTTP server
	held   []net.Conn            // connections accepted while hanging
	rule   *injection            // nil: no injection

	requests atomic.Int64
	injected atomic.Int64
}

// injection fails every nth write whose User-Agent contains agent.
type injection struct {
	agent  string
	status int
	every  int
	limit  int
	seen   int // matching writes
	done   int // of them, failed
}

// FaultProxy starts a proxy to the cluster's API server for the test t,
// passing everything through; it is closed when t ends.
func (c *Cluster) FaultProxy(t testing.TB) *FaultProxy {
	t.Helper()
	p, err := c.newFaultProxy(t.TempDir())
	if err != nil {
		t.Fatalf("%s: fault proxy: %v", c.Name, err)
	}
	t.Cleanup(p.Close)
	return p
}

func (c *Cluster) newFaultProxy(dir string) (*FaultProxy, error) {
	crt, key := filepath.Join(dir, "proxy.crt"), filepath.Join(dir, "proxy.key")
	if err := c.env.pki.serving(crt, key, netip.MustParseAddr("127.0.0.1")); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(c.Server)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.env.pki.CAPEM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{cluster: c, served: map[net.Conn]struct{}{}}
	p.URL = "https://" + ln.Addr().String()
	p.ln = &holdingListener{Listener: ln, p: p}
	upstream := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		Proxy:             nil,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport:     upstream,
		FlushInterval: -1, // watches stream
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.requests.Add(1)
			if status, ok := p.injectFor(r); ok {
				writeStatus(w, status)
				return
			}
			rp.ServeHTTP(w, r)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ConnState: p.track,
	}
	go func() { _ = p.srv.ServeTLS(p.ln, "", "") }()
	p.Kubeconfig = filepath.Join(dir, "proxy.kubeconfig")
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		p.Close()
		return nil, err
	}
	for _, cl := range kc.Clusters {
		cl.Server = p.URL
	}
	if err := clientcmd.WriteToFile(*kc, p.Kubeconfig); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Rewrite returns kubeconfig with every cluster's server set to the proxy:
// the same credentials, through the proxy.
func (p *FaultProxy) Rewrite(kubeconfig []byte) ([]byte, error) {
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, cl := range kc.Clusters {
		cl.Server = p.URL
	}
	return clientcmd.Write(*kc)
}

// DropConnections closes every connection open through the proxy, as a
// restarted load balancer does: clients reconnect, and their watches start
// again with a new request (authenticated and authorized anew).
func (p *FaultProxy) DropConnections() {
	p.mu.Lock()
	served := p.served
	p.served = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range served {
		_ = c.Close()
	}
}

// Hang makes the proxy accept connections and never answer them, as an
// address behind a black-holing firewall or a wedged load balancer does.
// Connections open now are closed, so clients reconnect into the hang.
func (p *FaultProxy) Hang() {
	p.hang.Store(true)
	p.DropConnections()
}

// Pass makes the proxy pass connections through again; connections held
// while it hung are closed.
func (p *FaultProxy) Pass() {
	p.hang.Store(false)
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		_ = c.Close()
	}
}

// Inject fails every nth write (POST, PUT, PATCH, DELETE) whose User-Agent
// contains agent with status, limit times under this rule (0: no limit), with the
// Status body the API server sends (reason Conflict for 409,
// TooManyRequests and Retry-After: 1 for 429). It replaces an earlier rule;
// a status of 0 removes it.
func (p *FaultProxy) Inject(agent string, status, every, limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if status == 0 {
		p.rule = nil
		return
	}
	if every < 1 {
		every = 1
	}
	p.rule = &injection{agent: agent, status: status, every: every, limit: limit}
}

// Injected is the number of requests failed by Inject so far.
func (p *FaultProxy) Injected() int64 { return p.injected.Load() }

// Requests is the number of HTTP requests the proxy has received.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Held is the number of connections accepted and left unanswered while
// hanging and not yet closed.
func (p *FaultProxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// Close stops the proxy and closes every connection.
func (p *FaultProxy) Close() {
	_ = p.srv.Close()
	_ = p.ln.Close()
	p.Pass()
}

func (p *FaultProxy) injectFor(r *http.Request) (int, bool) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rule := p.rule
	if rule == nil || !strings.Contains(r.UserAgent(), rule.agent) {
		return 0, false
	}
	if rule.limit > 0 && rule.done >= rule.limit {
		return 0, false
	}
	rule.seen++
	if rule.seen%rule.every != 0 {
		return 0, false
	}
	rule.done++
	p.injected.Add(1)
	return rule.status, true
}

// writeStatus answers as the API server answers a refused request.
func writeStatus(w http.ResponseWriter, status int) {
	reason := "Conflict"
	if status == http.StatusTooManyRequests {
		reason = "TooManyRequests"
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test's fault proxy","reason":%q,"code":%d}`, reason, status)
}

func (p *FaultProxy) track(c net.Conn, s http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateNew:
		p.served[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(p.served, c)
	}
}

// holdingListener hands connections to the HTTP server, or, while the
// proxy hangs, keeps them open without reading a byte.
type holdingListener struct {
	net.Listener
	p *FaultProxy
}

func (l *holdingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.p.hang.Load() {
			return c, nil
		}
		l.p.mu.Lock()
		l.p.held = append(l.p.held, c)
		l.p.mu.Unlock()
	}
}

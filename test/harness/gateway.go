package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/peers"
)

// GatewayOptions describes a `coredns-mc gateway` of one cluster.
type GatewayOptions struct {
	// TLS are the gateway's certificate, key and trust root.
	TLS gatewaytest.Files
	// Ingress runs the ingress, on a free port of 127.0.0.1.
	Ingress bool
	// Egress runs the egress, its ports bound on 127.0.0.1.
	Egress bool
	// Peers are the ingress addresses (host:port) of other clusters'
	// gateways, by cluster name: --peer.
	Peers map[string]string
	// Args are more flags, e.g. "--probe-interval", "1s".
	Args []string
	// InNode runs the gateway in the network namespace of its cluster's
	// node, as a hostNetwork pod: ingress (port 4143), egress ports and
	// metrics on the node's address. The cluster needs a data plane.
	InNode bool
	// MemoryLimit, when set, runs the gateway in a memory cgroup of its own
	// with this limit in bytes, and with GOMEMLIMIT set to it, as the
	// Deployment's limits.memory and env do (Gateway.Memory). The gateway is
	// then the binary as the image builds it (CorednsMCRelease), without the
	// race detector.
	MemoryLimit int64
}

// Gateway is a `coredns-mc gateway` run for a test. It can be stopped and
// started again on the same addresses, as a gateway that dies and comes
// back does.
type Gateway struct {
	// Cluster is the gateway's own cluster.
	Cluster *Cluster
	// IngressAddr is the ingress's address, host:port ("" without one).
	IngressAddr string
	// MetricsURL is the base URL of /metrics, /readyz and /peers.
	MetricsURL string

	env  *Env
	name string
	argv []string
	// mem is the memory cgroup of GatewayOptions.MemoryLimit, made by
	// StartGateway.
	mem *MemoryCgroup

	mu   sync.Mutex
	proc *Process
}

// StartGateway runs `coredns-mc gateway` for cluster c with its admin
// kubeconfig, for the test t, and waits until /readyz answers 200.
func (e *Env) StartGateway(t testing.TB, c *Cluster, o GatewayOptions) *Gateway {
	t.Helper()
	g, err := e.newGateway(c, o)
	if err != nil {
		t.Fatal(err)
	}
	if o.MemoryLimit > 0 {
		if g.mem, err = NewMemoryCgroup(g.name, o.MemoryLimit); err != nil {
			t.Fatal(err)
		}
		// Registered before the process's own cleanup, so it runs after.
		t.Cleanup(func() {
			if err := g.mem.Remove(); err != nil {
				t.Errorf("%s: %v", g.name, err)
			}
		})
	}
	g.Start(t)
	return g
}

// LaunchGateway is StartGateway outside tests (the demo): the gateway runs
// until the environment stops.
func (e *Env) LaunchGateway(c *Cluster, o GatewayOptions) (*Gateway, error) {
	if o.MemoryLimit > 0 {
		return nil, fmt.Errorf("%s: a memory limit is for tests (StartGateway)", c.Name)
	}
	g, err := e.newGateway(c, o)
	if err != nil {
		return nil, err
	}
	return g, g.Launch()
}

// newGateway works out a gateway's flags and addresses.
func (e *Env) newGateway(c *Cluster, o GatewayOptions) (*Gateway, error) {
	bin, err := CorednsMC()
	if o.MemoryLimit > 0 {
		// The limit is the Deployment's, for the binary the image holds.
		bin, err = CorednsMCRelease()
	}
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1"
	var argv []string
	if o.InNode {
		if argv, err = c.inNode(); err != nil {
			return nil, err
		}
		host = c.node.ip.String()
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics := net.JoinHostPort(host, strconv.Itoa(metricsPort))
	g := &Gateway{Cluster: c, MetricsURL: "http://" + metrics, env: e, name: c.Name + "/gateway"}
	argv = append(argv, bin, "gateway",
		"--cluster", c.Name,
		"--kubeconfig", c.Kubeconfig,
		"--metrics-addr", metrics,
		"--v", "3",
	)
	argv = append(argv, o.TLS.Args()...)
	if o.Ingress {
		ingressPort := 4143 // a node is a namespace of its own
		if !o.InNode {
			if ingressPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		g.IngressAddr = net.JoinHostPort(host, strconv.Itoa(ingressPort))
	}
	argv = append(argv, "--ingress-address", g.IngressAddr)
	if o.Egress {
		argv = append(argv, "--egress=true", "--egress-bind-address", host)
	} else {
		argv = append(argv, "--egress=false")
	}
	for _, name := range slices.Sorted(maps.Keys(o.Peers)) {
		argv = append(argv, "--peer", name+"="+o.Peers[name])
	}
	g.argv = append(argv, o.Args...)
	return g, nil
}

// Start starts the gateway, again after Stop, with the same flags and
// addresses, and waits until it is ready. The process is stopped when t
// ends.
func (g *Gateway) Start(t testing.TB) {
	t.Helper()
	if err := g.start(func(env, argv []string) (*Process, error) {
		return g.env.StartProcess(t, g.name, env, argv...), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Launch is Start outside a test (the demo, a package's gateway a test
// stops): the gateway runs until Stop or until the environment stops.
func (g *Gateway) Launch() error {
	return g.start(func(env, argv []string) (*Process, error) { return g.env.Launch(g.name, env, argv...) })
}

// start runs the gateway's process with run and waits until it is ready.
func (g *Gateway) start(run func(env, argv []string) (*Process, error)) error {
	g.mu.Lock()
	if g.proc != nil {
		if done, _ := g.proc.Exited(); !done {
			g.mu.Unlock()
			return fmt.Errorf("%s: started while running", g.name)
		}
	}
	argv, env := g.argv, []string(nil)
	if g.mem != nil {
		argv = g.mem.Wrap(argv)
		env = []string{"GOMEMLIMIT=" + strconv.FormatInt(g.mem.Limit, 10)}
	}
	p, err := run(env, argv)
	if err == nil {
		g.proc = p
	}
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.waitReady(p)
}

// waitReady waits until the gateway's /readyz answers 200, for a minute at
// most.
func (g *Gateway) waitReady(p *Process) error {
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited while starting: %v\n%s", g.name, err, p.Tail(30))
		}
		resp, err := client.Get(g.MetricsURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute (last: %v)\n%s", g.name, err, p.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the gateway (SIGTERM) and returns once it has exited.
func (g *Gateway) Stop() {
	g.mu.Lock()
	p := g.proc
	g.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// Memory is what the gateway's memory cgroup recorded (GatewayOptions.
// MemoryLimit): its peak and OOM kills since StartGateway.
func (g *Gateway) Memory() (MemoryStats, error) {
	if g.mem == nil {
		return MemoryStats{}, fmt.Errorf("%s has no memory limit", g.name)
	}
	return g.mem.Stats()
}

// Process is the gateway's current process.
func (g *Gateway) Process() *Process {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proc
}

// Running reports whether the current process is alive.
func (g *Gateway) Running() bool {
	p := g.Process()
	if p == nil {
		return false
	}
	done, _ := p.Exited()
	return !done
}

// Metric returns the sum of the samples of metric name whose labels include
// every pair of labels, and whether there is any such sample, e.g.
// g.Metric(`coredns_mcmirror_gateway_alive`, map[string]string{"cluster": "west"}).
func (g *Gateway) Metric(name string, labels map[string]string) (float64, bool, error) {
	return ScrapeMetric(g.MetricsURL+"/metrics", name, labels)
}

// Peers returns the gateway's /peers by cluster.
func (g *Gateway) Peers() (map[string]peers.State, error) {
	body, err := getBody(g.MetricsURL+"/peers", 2*time.Second)
	if err != nil {
		return nil, err
	}
	states, err := peers.Decode(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("/peers: %w", err)
	}
	return states, nil
}

// ScrapeMetric reads the Prometheus text exposition at url and returns the
// sum of the samples of metric name whose labels include every pair of
// labels, and whether any sample matched.
func ScrapeMetric(url, name string, labels map[string]string) (float64, bool, error) {
	body, err := getBody(url, 5*time.Second)
	if err != nil {
		return 0, false, err
	}
	return sumSamples(bytes.NewReader(body), name, labels)
}

// MetricIn is ScrapeMetric of an exposition already read (one fetched from
// inside a pod, say).
func MetricIn(exposition, name string, labels map[string]string) (float64, bool, error) {
	return sumSamples(strings.NewReader(exposition), name, labels)
}

// sumSamples parses the text exposition format, as much of it as metrics
// with plain label values need.
func sumSamples(r io.Reader, name string, want map[string]string) (float64, bool, error) {
	var sum float64
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		got := map[string]string{}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, false, fmt.Errorf("bad sample %q", line)
			}
			var err error
			if got, err = parseLabels(rest[1:end]); err != nil {
				return 0, false, fmt.Errorf("bad sample %q: %w", line, err)
			}
			rest = rest[end+1:]
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("bad sample %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("bad sample %q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}

// parseLabels parses `a="x",b="y"` with Go-style escapes in the values.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || rest == "" || rest[0] != '"' {
			return nil, fmt.Errorf("label %q", s)
		}
		end := 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(rest) {
			return nil, fmt.Errorf("unterminated label value %q", rest)
		}
		v, err := strconv.Unquote(rest[:end+1])
		if err != nil {
			return nil, err
		}
		out[strings.TrimSpace(k)] = v
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest[end+1:]), ","))
	}
	return out, nil
}

// Package harness runs real Kubernetes control planes for mcmirror's
// end-to-end tests: one etcd shared by several named clusters, each with its
// own kube-apiserver (RBAC, ServiceAccount tokens, etcd prefix, service CIDR)
// and, where asked, kube-controller-manager and KWOK, so that StatefulSets get
// Running pods and EndpointSlices the way a real cluster makes them.
//
// One environment serves a whole test package:
//
//	var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
//		{Name: "east"}, {Name: "west", Workloads: true},
//	}})
//
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//
// # What is real and what is simulated
//
// Real: etcd, kube-apiserver, kube-controller-manager (the EndpointSlice,
// StatefulSet and token controllers), RBAC and ServiceAccount tokens, the
// coredns-mc processes, and, in a cluster started with DataPlane, the
// network: kube-proxy v1.32.3 in nftables mode in the node's network
// namespace programs every Service (mirror ClusterIPs included), each pod
// has a network namespace of its own with its pod IP, veth-linked to its
// node, a server on every container port and the resolv.conf the kubelet
// would write (cluster DNS, search path, ndots:5), so that curl and Go
// clients run in a pod (Cluster.Exec, GoFetch, FindPeers) resolve with the
// system resolver and connect through kube-proxy as on a real node.
//
// Simulated: the node and the kubelet. KWOK marks pods Running and Ready
// and gives them IPs; there are no containers, images or probes: the
// harness runs one server per pod (Identity on every port: HTTP on ports
// named http or http-*, a greeting and echo otherwise), and a pod of
// ClientImage runs nothing. There is one node per cluster and no
// scheduler (pods set spec.nodeName). A LoadBalancer Service gets no
// address. The clusters' nodes share one bridge on the host: in gateway
// mode (the default) they reach each other's node addresses only, so
// traffic between clusters can only go through the gateways; with
// RoutePodsBetweenClusters(true) they route each other's pod CIDRs, as
// flat mode needs. Nodes have no default route, and the host holds
// blackhole routes for every range the harness uses: no test packet leaves
// the machine.
//
// # Faults
//
// Tests break the environment on purpose. Cluster.StopAPIServer and
// StartAPIServer (or APIServerOutage, which restarts it at the end of the
// test in any case) stop one cluster's kube-apiserver and start it again at
// the same address and port with the same certificates, tokens and etcd
// data; a deliberate stop is not a crash, so nothing else fails meanwhile.
// Cluster.FaultProxy puts a TLS-terminating proxy (certificate of the
// environment's CA) in front of an API server: it passes requests and
// watches through, drops every connection (DropConnections), hangs
// (accepts TCP, never answers TLS), or answers chosen writes of one user
// agent with 409 or 429 as a busy API server would (Inject). Env.RequireAlive
// is what a check that something did not happen calls first: it fails if a
// process under test, or one of the environment, has died.
//
// Every process the harness starts is stopped when the package's tests end,
// when the test that started it ends, and, should the test binary die, by the
// kernel. Logs stay in the environment's directory; a failed test prints what
// they gained while it ran.
package harness

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// Options describes an environment.
type Options struct {
	// Clusters to start, in order. Names must be unique DNS labels.
	Clusters []ClusterOptions
	// StartTimeout bounds the start of the whole environment (default 3m;
	// 15m with a real node, whose start may first wait for the host lock
	// while another package's real nodes run).
	StartTimeout time.Duration
}

// ClusterOptions describes one cluster of an environment.
type ClusterOptions struct {
	// Name of the cluster, e.g. "west".
	Name string
	// Workloads runs kube-controller-manager and KWOK in this cluster.
	Workloads bool
	// DataPlane makes the cluster's Services and pods real (it implies
	// Workloads): its simulated node gets a network namespace with
	// kube-proxy programming the Services, every pod KWOK runs there gets a
	// namespace with its pod IP and a server on its container ports, and
	// kube-system/kube-dns points at the node, where a fleet's DNS runs
	// (StartFleet). The API servers of every cluster then listen on the node
	// network's host address instead of 127.0.0.1.
	DataPlane bool
	// RealNode gives the cluster a node of real parts instead of KWOK's:
	// in the node's network namespace, containerd and runc run the pods,
	// the kubelet v1.32.3 drives them (probes, volumes, the downward API,
	// securityContext, exec and logs are its own), the CNI bridge plugin
	// gives each pod an address of the cluster's pod CIDR, and kube-proxy
	// programs the Services; kube-scheduler places the pods. Images come
	// from LocalImages, imported into the node's containerd. The API server
	// then admits ServiceAccounts (pods get their tokens) and keeps the
	// kubernetes Service's endpoints, so pods reach it in-cluster. There is
	// no cluster DNS until a test installs one.
	RealNode bool
	// MCS installs the ServiceExport and ServiceImport CRDs of
	// sigs.k8s.io/mcs-api (InstallMCSCRDs) once the API server is up.
	MCS bool
	// DualStack gives the API server an IPv6 service range beside the
	// IPv4 one (Cluster.ServiceCIDRv6; IPv4 stays the primary family), so
	// that Services may be dual-stack (dualstack.go). Pods stay IPv4
	// (KWOK gives each one address); not with DataPlane or RealNode,
	// whose networks are IPv4 only.
	DualStack bool
}

// Env is a set of running clusters.
type Env struct {
	// Dir holds the environment's state and every process's log. It is
	// removed when all tests passed and kept otherwise.
	Dir string

	opts     Options
	pki      *pki
	caFile   string
	saKey    string
	saPub    string
	etcdURL  string
	clusters []*Cluster
	byName   map[string]*Cluster
	pods     *podNet
	nodes    *nodeNet   // nil unless a cluster has a data plane
	apiHost  netip.Addr // where the API servers listen
	host     hostState  // what real nodes change on the host, to undo

	mu     sync.Mutex
	procs  []*Process     // every process ever started, in start order
	starts map[string]int // starts per log name, for unique log files

	gwCAOnce sync.Once // GatewayCA
	gwCA     *gatewaytest.CA
	gwCAErr  error
}

// New returns an environment that Run or Start brings up.
func New(opts Options) *Env {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
		for _, c := range opts.Clusters {
			if c.RealNode {
				opts.StartTimeout = 15 * time.Minute
			}
		}
	}
	return &Env{opts: opts, byName: map[string]*Cluster{}, starts: map[string]int{}}
}

// Run is the body of a TestMain: it starts the environment, runs the tests,
// stops every process, checks that none is left, and returns the exit code.
// A test binary re-executed by RunPod as a helper server never returns from
// Run: it serves and exits.
func (e *Env) Run(m *testing.M) int {
	runRoleIfAsked()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.StartTimeout)
	err := e.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "harness: %v\n", err)
		e.dumpLogs(os.Stderr)
		e.Stop()
		return 1
	}
	fmt.Fprintf(os.Stderr, "harness: %d clusters ready in %.1fs (state and logs in %s)\n",
		len(e.clusters), time.Since(start).Seconds(), e.Dir)
	code := m.Run()
	e.Stop()
	if left := e.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "harness: left running or mounted after stop: %s\n", strings.Join(left, ", "))
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "harness: logs kept in %s\n", e.Dir)
	} else {
		_ = os.RemoveAll(e.Dir)
	}
	return code
}

// Start brings up etcd and every cluster. Clusters start in parallel.
func (e *Env) Start(ctx context.Context) error {
	if err := e.validate(); err != nil {
		return err
	}
	var err error
	if e.Dir, err = os.MkdirTemp("", "mcmirror-e2e-"); err != nil {
		return err
	}
	if e.pki, err = newPKI(); err != nil {
		return err
	}
	e.caFile = filepath.Join(e.Dir, "ca.crt")
	e.saKey, e.saPub = filepath.Join(e.Dir, "sa.key"), filepath.Join(e.Dir, "sa.pub")
	if err := os.WriteFile(e.caFile, e.pki.CAPEM, 0o644); err != nil {
		return err
	}
	if err := writeServiceAccountKey(e.saKey, e.saPub); err != nil {
		return err
	}
	if e.pods, err = newPodNet(); err != nil {
		return err
	}
	e.apiHost = netip.MustParseAddr("127.0.0.1")
	for _, co := range e.opts.Clusters {
		if (co.DataPlane || co.RealNode) && e.nodes == nil {
			if e.nodes, err = newNodeNet(); err != nil {
				return err
			}
			e.apiHost = e.nodes.host
		}
	}
	if err := e.startEtcd(ctx); err != nil {
		return err
	}
	for i, co := range e.opts.Clusters {
		c := &Cluster{
			Name:      co.Name,
			Workloads: co.Workloads || co.DataPlane || co.RealNode,
			DataPlane: co.DataPlane,
			env:       e,
			index:     i,
			dir:       filepath.Join(e.Dir, co.Name),
			// Distinct ranges per cluster, so that an address says which
			// cluster it belongs to: services 10.96+i.0.0/16, pods
			// 10.200+i.0.0/16.
			ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + i), 0, 0}), 16),
			PodCIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + i), 0, 0}), 16),
		}
		if co.DualStack {
			c.ServiceCIDRv6 = serviceCIDRv6(i)
		}
		c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
		e.clusters = append(e.clusters, c)
		e.byName[c.Name] = c
		if c.DataPlane || co.RealNode {
			if c.node, err = e.nodes.addNode(c, i); err != nil {
				return err
			}
		}
		if co.RealNode {
			c.real = newRealNode(c)
		}
	}
	return e.parallel(ctx, func(ctx context.Context, c *Cluster) error {
		if err := c.startAPIServer(e.etcdURL); err != nil {
			return err
		}
		if err := c.waitAPIServer(ctx); err != nil {
			return err
		}
		if e.opts.Clusters[c.index].MCS {
			if err := c.InstallMCSCRDs(ctx); err != nil {
				return err
			}
		}
		if c.real != nil {
			return c.startRealNode(ctx)
		}
		if !c.Workloads {
			return nil
		}
		if err := c.startWorkloads(); err != nil {
			return err
		}
		if err := c.waitWorkloads(ctx); err != nil {
			return err
		}
		if !c.DataPlane {
			return nil
		}
		return c.startDataPlane(ctx)
	})
}

// Limits of an environment's size: the address ranges per cluster.
const (
	maxClusters         = 160
	maxWorkloadClusters = 50
)

func (e *Env) validate() error {
	if len(e.opts.Clusters) == 0 {
		return fmt.Errorf("harness: no clusters")
	}
	// Each cluster has service range 10.(96+i).0.0/16 and, with workloads,
	// pod range 10.(200+i).0.0/16: 160 clusters of API servers alone, 50
	// when any runs pods.
	limit := maxClusters
	for _, c := range e.opts.Clusters {
		if c.Workloads || c.DataPlane || c.RealNode {
			limit = maxWorkloadClusters
		}
	}
	if len(e.opts.Clusters) > limit {
		return fmt.Errorf("harness: at most %d clusters (%d with workloads)", maxClusters, maxWorkloadClusters)
	}
	seen := map[string]bool{}
	for _, c := range e.opts.Clusters {
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("harness: cluster names must be unique and not empty: %q", c.Name)
		}
		seen[c.Name] = true
		if c.DualStack && (c.DataPlane || c.RealNode) {
			return fmt.Errorf("harness: cluster %s: DualStack is for API servers only, not with DataPlane or RealNode", c.Name)
		}
	}
	return nil
}

// parallel runs f for every cluster at once and returns the first error.
func (e *Env) parallel(ctx context.Context, f func(context.Context, *Cluster) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(e.clusters))
	for _, c := range e.clusters {
		go func() {
			err := f(ctx, c)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
	}
	var first error
	for range e.clusters {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (e *Env) startEtcd(ctx context.Context) error {
	bin, err := Binary("etcd")
	if err != nil {
		return err
	}
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	e.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	if _, err := e.startProcess("etcd", nil, bin,
		"--name=e2e",
		"--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+e.etcdURL, "--advertise-client-urls="+e.etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		"--unsafe-no-fsync", // test data: speed over durability
		"--log-level=warn",
	); err != nil {
		return err
	}
	return e.poll(ctx, "etcd", func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(client), time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// Stop stops every process in reverse start order and removes the pod
// network namespaces. It is safe to call more than once.
func (e *Env) Stop() {
	// Pods first, so that no pod is made real while the clusters go.
	for _, c := range e.clusters {
		if c.pods != nil {
			c.pods.stop()
		}
	}
	// Real nodes next, while their API servers are up: their pods are
	// stopped through containerd, and nothing of them is left on the host.
	for _, c := range e.clusters {
		if c.real != nil {
			if err := c.real.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "harness: %v\n", err)
			}
		}
	}
	e.mu.Lock()
	procs := append([]*Process(nil), e.procs...)
	e.mu.Unlock()
	// Reverse start order: every component stops while the API servers and
	// etcd it talks to are still there, and etcd, which all need, goes last.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
	if e.pods != nil {
		e.pods.removeAll()
	}
	if e.nodes != nil {
		e.nodes.removeAll()
	}
	if err := e.host.release(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: restoring the host: %v\n", err)
	}
}

// Cluster returns the cluster called name; it panics on an unknown name,
// which is a bug in the test.
func (e *Env) Cluster(name string) *Cluster {
	c, ok := e.byName[name]
	if !ok {
		panic(fmt.Sprintf("harness: no cluster %q", name))
	}
	return c
}

// Clusters returns the clusters in the order of Options.Clusters.
func (e *Env) Clusters() []*Cluster { return append([]*Cluster(nil), e.clusters...) }

// EtcdURL is the client URL of the etcd every API server of the
// environment stores in; its /metrics has the database's size.
func (e *Env) EtcdURL() string { return e.etcdURL }

// CAPEM is the CA certificate every API server's serving certificate chains
// to.
func (e *Env) CAPEM() []byte { return append([]byte(nil), e.pki.CAPEM...) }

// startProcess starts a process, records it, and appends its PID to the
// environment's pids file (and to $MCMIRROR_PID_FILE when set), so that a
// check after the run can prove nothing was left behind.
func (e *Env) startProcess(name string, env []string, argv ...string) (*Process, error) {
	return e.launch(name, true, env, argv...)
}

// launch starts and records a process. A critical one is part of the
// environment: its exit fails every wait of the harness.
func (e *Env) launch(name string, critical bool, env []string, argv ...string) (*Process, error) {
	// One log per start: a restarted process (same name) gets a log of its
	// own, so that what a test reads from it is that process's alone.
	base := filepath.Join(e.Dir, "logs", strings.NewReplacer("/", "-", " ", "_").Replace(name))
	e.mu.Lock()
	e.starts[base]++
	logPath := base + ".log"
	if n := e.starts[base]; n > 1 {
		logPath = fmt.Sprintf("%s.%d.log", base, n)
	}
	e.mu.Unlock()
	p, err := startProcess(name, logPath, env, argv...)
	if err != nil {
		return nil, err
	}
	p.critical = critical
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	// "PID STARTTIME NAME": a PID alone may name another process by the
	// time the pids are checked, since PIDs are reused.
	line := fmt.Sprintf("%d %d %s\n", p.PID, p.StartTime, name)
	appendFile(filepath.Join(e.Dir, "pids"), line)
	if f := os.Getenv("MCMIRROR_PID_FILE"); f != "" {
		appendFile(f, line)
	}
	return p, nil
}

// setCritical makes p part of the environment: its exit fails every wait.
func (e *Env) setCritical(p *Process) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p.critical = true
}

// Launch starts a process that belongs to the environment: Stop stops it.
// Outside tests (the demo) it is what StartProcess is inside them.
func (e *Env) Launch(name string, env []string, argv ...string) (*Process, error) {
	return e.launch(name, false, env, argv...)
}

// StartProcess starts a process for the test t, e.g. a coredns-mc server, with its
// log in the environment's log directory. The process is stopped when t
// ends. env is added to the environment of the process.
func (e *Env) StartProcess(t testing.TB, name string, env []string, argv ...string) *Process {
	t.Helper()
	p, err := e.Launch(name, env, argv...)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// exited returns a critical process that has exited although nobody stopped
// it.
func (e *Env) exited() *Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if done, _ := p.Exited(); done && p.critical && !p.stopping.Load() {
			return p
		}
	}
	return nil
}

// Leftovers lists the recorded processes that are still running, and what a
// real node left on the host (mounts, cgroups, containerd shims).
func (e *Env) Leftovers() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var left []string
	for _, p := range e.procs {
		// A process that was waited for is gone, whatever now holds its PID.
		if done, _ := p.Exited(); !done && alive(p.PID) {
			left = append(left, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
		}
	}
	for _, c := range e.clusters {
		if c.real != nil {
			left = append(left, c.real.leftovers()...)
		}
	}
	return left
}

// LogOnFailure makes t print, if it fails, the last lines that every log of
// the environment gained while t ran.
func (e *Env) LogOnFailure(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	offsets := map[string]int64{}
	for _, p := range e.procs {
		offsets[p.LogPath] = fileSize(p.LogPath)
	}
	e.mu.Unlock()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		e.mu.Lock()
		procs := append([]*Process(nil), e.procs...)
		e.mu.Unlock()
		for _, p := range procs {
			if tail := tailFile(p.LogPath, offsets[p.LogPath], 40); tail != "" {
				t.Logf("--- %s (%s), last lines while the test ran:\n%s", p.Name, p.LogPath, tail)
			}
		}
	})
}

// dumpLogs writes the tail of every log to w.
func (e *Env) dumpLogs(w *os.File) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		fmt.Fprintf(w, "--- %s (%s):\n%s\n", p.Name, p.LogPath, p.Tail(30))
	}
}

func appendFile(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}

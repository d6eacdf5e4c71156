package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// ClientImage is the image of the harness's client pods. A pod of it gets a
// network namespace, an address and a resolv.conf like any pod, and runs
// nothing: Exec runs commands in it, as `kubectl exec` runs them in a
// container.
const ClientImage = "mcmirror.dev/e2e-client"

// podRunner makes the pods KWOK runs on a cluster's simulated node real:
// each Running pod with an IP gets a network namespace with that IP, joined
// to the node's namespace by a veth pair, a resolv.conf that names the
// cluster DNS, and (unless it is a client pod) a server on every container
// port that answers with the pod's identity. A pod that goes away takes
// its namespace and server with it.
type podRunner struct {
	c     *Cluster
	queue workqueue.TypedRateLimitingInterface[string]
	pods  listerscorev1.PodLister

	mu      sync.Mutex
	running map[string]*runningPod // by namespace/name
	next    int                    // veth number in the node
	cancel  context.CancelFunc
	done    chan struct{}
}

// runningPod is one pod made real.
type runningPod struct {
	uid   types.UID
	ip    netip.Addr
	netns string
	veth  string // the node's end of the pod's veth pair
	proc  *Process
}

func newPodRunner(c *Cluster) *podRunner {
	return &podRunner{
		c:       c,
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		running: map[string]*runningPod{},
		done:    make(chan struct{}),
	}
}

// start watches the node's pods and works on them until stop.
func (r *podRunner) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	f := informers.NewSharedInformerFactoryWithOptions(r.c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", NodeName).String()
		}))
	inf := f.Core().V1().Pods()
	r.pods = inf.Lister()
	enqueue := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(k)
		}
	}
	if _, err := inf.Informer().AddEventHandler(remote.OnAny(enqueue)); err != nil {
		cancel()
		return err
	}
	f.Start(ctx.Done())
	go func() {
		defer close(r.done)
		for r.work() {
		}
	}()
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	return nil
}

// stop stops watching and removes every pod's namespace and server.
func (r *podRunner) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.mu.Lock()
	keys := make([]string, 0, len(r.running))
	for k := range r.running {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.remove(k)
	}
}

func (r *podRunner) work() bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if err := r.sync(key); err != nil {
		fmt.Fprintf(os.Stderr, "harness: %s: pod %s: %v\n", r.c.Name, key, err)
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// sync makes the pod key real, or removes what is left of it.
func (r *podRunner) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	pod, err := r.pods.Pods(ns).Get(name)
	if err != nil || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		r.remove(key)
		return nil
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return err
	}
	r.mu.Lock()
	rp := r.running[key]
	r.mu.Unlock()
	if rp != nil && rp.uid == pod.UID && rp.ip == addr {
		return nil
	}
	if rp != nil {
		r.remove(key) // a new pod of the same name, or a new address
	}
	return r.add(key, pod, addr)
}

// add creates the pod's namespace and starts its server.
func (r *podRunner) add(key string, pod *corev1.Pod, addr netip.Addr) error {
	node := r.c.node
	r.mu.Lock()
	veth := "v" + strconv.Itoa(r.next)
	r.next++
	r.mu.Unlock()
	rp := &runningPod{uid: pod.UID, ip: addr, veth: veth,
		netns: node.netns + "-" + pod.Namespace + "-" + pod.Name}
	r.mu.Lock()
	r.running[key] = rp
	r.mu.Unlock()
	gw := podGatewayIP.String()
	for _, s := range [][]string{
		{"netns", "add", rp.netns},
		{"-n", node.netns, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", rp.netns},
		{"-n", node.netns, "link", "set", veth, "up"},
		{"-n", node.netns, "route", "add", addr.String() + "/32", "dev", veth},
		{"-n", rp.netns, "link", "set", "lo", "up"},
		{"-n", rp.netns, "addr", "add", addr.String() + "/32", "dev", "eth0"},
		{"-n", rp.netns, "link", "set", "eth0", "up"},
		{"-n", rp.netns, "route", "add", gw, "dev", "eth0", "scope", "link"},
		{"-n", rp.netns, "route", "add", "default", "via", gw, "dev", "eth0"},
	} {
		if err := ip(s...); err != nil {
			r.remove(key)
			return err
		}
	}
	if err := r.writeEtc(rp, pod); err != nil {
		r.remove(key)
		return err
	}
	if isClient(pod) {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		r.remove(key)
		return err
	}
	proc, err := r.c.env.Launch(r.c.Name+"/pod/"+pod.Namespace+"/"+pod.Name, []string{
		roleEnv + "=pod",
		"MCMIRROR_POD_CLUSTER=" + r.c.Name,
		"MCMIRROR_POD_NAMESPACE=" + pod.Namespace,
		"MCMIRROR_POD_NAME=" + pod.Name,
		"MCMIRROR_POD_PORTS=" + podPorts(pod),
	}, "ip", "netns", "exec", rp.netns, exe)
	if err != nil {
		r.remove(key)
		return err
	}
	r.mu.Lock()
	rp.proc = proc
	r.mu.Unlock()
	return nil
}

// writeEtc writes the pod's resolv.conf and hosts where `ip netns exec`
// mounts them over /etc for every process it starts in the namespace: the
// cluster DNS, the search path of the pod's namespace and ndots:5, as the
// kubelet writes them, so that the system resolver (glibc's, Go's) is what
// resolves names in a pod.
func (r *podRunner) writeEtc(rp *runningPod, pod *corev1.Pod) error {
	dir := filepath.Join("/etc/netns", rp.netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	zone := "cluster.local"
	resolv := fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver %s\noptions ndots:5\n",
		pod.Namespace, zone, zone, zone, r.c.DNSServiceIP())
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n%s\t%s\n", rp.ip, pod.Name)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644)
}

// remove stops the pod's server and deletes its namespace.
func (r *podRunner) remove(key string) {
	r.mu.Lock()
	rp := r.running[key]
	delete(r.running, key)
	r.mu.Unlock()
	if rp == nil {
		return
	}
	if rp.proc != nil {
		rp.proc.Stop()
	}
	_ = ip("-n", r.c.node.netns, "link", "del", rp.veth)
	_ = ip("netns", "del", rp.netns)
	_ = os.RemoveAll(filepath.Join("/etc/netns", rp.netns))
}

// netns returns the namespace of the running pod ns/name.
func (r *podRunner) netns(ns, name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.running[ns+"/"+name]
	if rp == nil {
		return "", false
	}
	return rp.netns, true
}

func isClient(pod *corev1.Pod) bool {
	return len(pod.Spec.Containers) > 0 && pod.Spec.Containers[0].Image == ClientImage
}

// podPorts lists a pod's container ports as name:port, sorted.
func podPorts(pod *corev1.Pod) string {
	var ports []string
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports = append(ports, p.Name+":"+strconv.Itoa(int(p.ContainerPort)))
			}
		}
	}
	sort.Strings(ports)
	return strings.Join(ports, ",")
}

// PodNetns returns the network namespace of pod ns/name of c once the pod
// runs, e.g. for `ip netns exec NETNS curl ...`.
func (c *Cluster) PodNetns(ns, name string) (string, bool) {
	if c.pods == nil {
		return "", false
	}
	return c.pods.netns(ns, name)
}

// Exec runs argv in pod ns/name of c and returns what it printed (stdout
// and stderr). The command sees the pod's network and its resolv.conf.
func (c *Cluster) Exec(ctx context.Context, ns, name string, argv ...string) (string, error) {
	return c.exec(ctx, ns, name, nil, argv...)
}

func (c *Cluster) exec(ctx context.Context, ns, name string, env []string, argv ...string) (string, error) {
	netns, ok := c.PodNetns(ns, name)
	if !ok {
		return "", fmt.Errorf("%s: pod %s/%s is not running", c.Name, ns, name)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: exec in %s/%s: %s: %w: %s", c.Name, ns, name, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

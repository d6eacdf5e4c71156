package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// realNode is a cluster's node made of real parts, in the node's network
// namespace: containerd (Debian's, with runc) runs the pods, the kubelet
// v1.32.3 drives it, the CNI bridge plugin gives every pod a network
// namespace and an address of the cluster's pod CIDR on a bridge of the
// node, and kube-proxy programs the Services. Images come only from local
// archives imported into containerd (Images); nothing is pulled.
//
// containerd and the kubelet share the host's mount namespace (they enter
// only the node's network namespace), so that the volumes the kubelet mounts
// (Secrets, ConfigMaps, projected tokens) are what runc bind-mounts into
// containers.
type realNode struct {
	c    *Cluster
	name string // the Node's name
	dir  string // containerd's root and state, the kubelet's root, CNI config and IPAM
	// sock is containerd's socket, which the kubelet and ctr talk to.
	sock string
	// cgroup is the kubelet's cgroupRoot: every pod's cgroup is under it,
	// in each cgroup v1 hierarchy, and teardown removes it.
	cgroup string

	containerd *Process
	kubelet    *Process
}

// RealNodeName is the name of the real node of cluster c.
func RealNodeName(c *Cluster) string { return c.Name + "-node" }

func newRealNode(c *Cluster) *realNode {
	dir := filepath.Join(c.dir, "node")
	return &realNode{
		c:      c,
		name:   RealNodeName(c),
		dir:    dir,
		sock:   filepath.Join(dir, "containerd.sock"),
		cgroup: fmt.Sprintf("/mcm%d-%s", os.Getpid(), c.Name),
	}
}

// nsenter returns argv run in the node's network namespace and nothing
// else of it (`ip netns exec` would also give it a mount namespace of its
// own).
func (n *realNode) nsenter(argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.c.node.netns, "--"}, argv...)
}

// start brings the node up: CNI configuration, containerd, the images, the
// kubelet, kube-proxy; it returns once the Node is Ready and kube-proxy
// serves.
func (n *realNode) start(ctx context.Context) error {
	c, e := n.c, n.c.env
	if err := e.host.hold(e.apiHost); err != nil {
		return err
	}
	if err := e.host.makeCgroup(n.cgroup); err != nil {
		return err
	}
	for _, d := range []string{"cni/net.d", "cni/ipam", "containerd", "kubelet", "pki", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}
	var err error
	if n.containerd, err = e.startProcess(c.Name+"/containerd", nil,
		n.nsenter("containerd", "--config", filepath.Join(n.dir, "containerd.toml"))...); err != nil {
		return err
	}
	if err := e.poll(ctx, c.Name+"/containerd", func(context.Context) (bool, error) {
		return exec.Command("ctr", "-a", n.sock, "version").Run() == nil, nil
	}); err != nil {
		return err
	}
	if err := n.importImages(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	// A node is Ready once the kubelet has registered it and containerd
	// reports its network (the CNI configuration) ready.
	ctx2, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := e.poll(ctx2, c.Name+"/kubelet node Ready", func(ctx context.Context) (bool, error) {
		nd, err := c.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	return c.startKubeProxy(ctx, n.name)
}

// devicePluginSocket is the kubelet's device plugin socket, the same for
// every kubelet whatever its --root-dir. At start a kubelet empties its
// directory, then binds it: two kubelets starting at once failed, the
// second one's bind finding the first one's socket ("Failed to start
// ContainerManager ... address already in use").
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// startKubelet starts the node's kubelet, one kubelet of the environment at
// a time until it has bound devicePluginSocket.
func (n *realNode) startKubelet(ctx context.Context) error {
	c, e := n.c, n.c.env
	kubelet, err := Binary("kubelet")
	if err != nil {
		return err
	}
	e.host.kubelets.Lock()
	defer e.host.kubelets.Unlock()
	if err := os.Remove(devicePluginSocket); err != nil && !os.IsNotExist(err) {
		return err
	}
	if n.kubelet, err = e.startProcess(c.Name+"/kubelet", nil, n.nsenter(kubelet,
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+c.Kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.dir, "pki"),
		"--hostname-override="+n.name,
		"--node-ip="+c.node.ip.String(),
		"--node-labels=topology.kubernetes.io/zone="+c.Name+"-a",
	)...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return e.poll(ctx, c.Name+"/kubelet's "+devicePluginSocket, func(context.Context) (bool, error) {
		fi, err := os.Stat(devicePluginSocket)
		return err == nil && fi.Mode()&os.ModeSocket != 0, nil
	})
}

// importImages imports every local image archive into containerd's k8s.io
// namespace, where the kubelet looks for them.
func (n *realNode) importImages(ctx context.Context) error {
	imgs, err := LocalImages()
	if err != nil {
		return err
	}
	for _, archive := range imgs.Archives {
		cmd := exec.CommandContext(ctx, "ctr", "-a", n.sock, "-n", "k8s.io", "images", "import", archive)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: import %s: %v: %s", n.c.Name, archive, err, out)
		}
	}
	return nil
}

// writeConfigs writes containerd's configuration, the CNI network, the
// kubelet's configuration and the resolv.conf it gives pods of dnsPolicy
// Default.
func (n *realNode) writeConfigs() error {
	c := n.c
	imgs, err := LocalImages()
	if err != nil {
		return err
	}
	// restrict_oom_score_adj: this machine's bounding set lacks
	// CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj as the pause
	// container asks (-998) and fails to create the sandbox.
	containerd := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.sock, n.sock+".ttrpc",
		filepath.Join(n.dir, "containerd", "opt"), imgs.Pause, filepath.Join(n.dir, "cni", "net.d"))
	// The bridge masquerades what pods send outside the pod CIDR: the API
	// servers and other clusters' nodes answer the node's address, as they
	// would on a cloud network. hairpinMode lets a pod reach itself through
	// a Service.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "mcmirror",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.PodCIDR.String(), filepath.Join(n.dir, "cni", "ipam"))
	// The kubelet's cgroup driver is cgroupfs (this machine has cgroup v1
	// and no systemd); images are never collected (they cannot be pulled
	// again); eviction thresholds are low, since each kubelet sees the whole
	// machine.
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]q}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://%[3]s
cgroupDriver: cgroupfs
cgroupRoot: %[4]s
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
clusterDNS: [%[5]s]
clusterDomain: cluster.local
resolvConf: %[6]q
podLogsDir: %[7]q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
staticPodPath: ""
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
`, c.node.ip, n.c.env.caFile, n.sock, n.cgroup, c.DNSServiceIP(),
		filepath.Join(n.dir, "resolv.conf"), filepath.Join(n.dir, "pod-logs"))
	// Pods of dnsPolicy Default (the cluster DNS itself) forward to the
	// upstream resolver on the host's address of the node network
	// (upstreamDNS): no query leaves this machine.
	resolv := fmt.Sprintf("nameserver %s\n", c.env.apiHost)
	for name, data := range map[string]string{
		"containerd.toml":                containerd,
		"cni/net.d/10-mcmirror.conflist": cni,
		"kubelet.yaml":                   kubelet,
		"resolv.conf":                    resolv,
	} {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startKubeProxy starts kube-proxy in the node's network namespace for the
// Node called nodeName and waits until it serves.
func (c *Cluster) startKubeProxy(ctx context.Context, nodeName string) error {
	bin, err := Binary("kube-proxy")
	if err != nil {
		return err
	}
	health := net.JoinHostPort(c.node.ip.String(), strconv.Itoa(kubeProxyHealthPort))
	if _, err := c.env.startProcess(c.Name+"/kube-proxy", nil,
		"ip", "netns", "exec", c.node.netns, bin,
		"--kubeconfig="+c.Kubeconfig,
		"--proxy-mode=nftables",
		"--hostname-override="+nodeName,
		"--cluster-cidr="+c.PodCIDR.String(),
		"--conntrack-max-per-core=0",
		"--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address="+health,
	); err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Second}
	return c.env.poll(ctx, c.Name+"/kube-proxy", func(context.Context) (bool, error) {
		resp, err := client.Get("http://" + health + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// startScheduler starts kube-scheduler: pods of Deployments and
// StatefulSets on a real node are scheduled, as in any cluster.
func (c *Cluster) startScheduler() error {
	bin, err := Binary("kube-scheduler")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	_, err = c.env.startProcess(c.Name+"/kube-scheduler", nil, bin,
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
	)
	return err
}

// Kubectl runs the project's kubectl against the cluster with args and
// returns its combined output (with `exec`, what the command in the pod
// printed on either stream); on success without kubectl's own log lines
// (withoutLogLines), which are about kubectl, not the command.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	bin, err := Binary("kubectl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: kubectl %s: %v: %s", c.Name, strings.Join(args, " "), err, out)
	}
	return withoutLogLines(string(out), cmd.Process.Pid), nil
}

// withoutLogLines returns out without the lines that process pid logged
// with klog (I1127 23:14:38.745213   30507 websocket.go:296] ...): kubectl
// logs such lines to its stderr beside what a command in a pod prints
// (an exec stream it discards, say), and a test reads the command's.
func withoutLogLines(out string, pid int) string {
	own := regexp.MustCompile(`^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+` + strconv.Itoa(pid) + ` \S+:\d+\] `)
	lines := strings.SplitAfter(out, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !own.MatchString(l) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "")
}

// startRealNode starts what runs a real node's pods: the controller
// manager, the scheduler, and the node itself.
func (c *Cluster) startRealNode(ctx context.Context) error {
	if err := c.startWorkloads(); err != nil {
		return err
	}
	if err := c.startScheduler(); err != nil {
		return err
	}
	return c.real.start(ctx)
}

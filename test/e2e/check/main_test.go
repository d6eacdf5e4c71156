// Package check_test runs `coredns-mc check` against real clusters: east
// links west in gateway mode, installed from deploy/*.yaml (east: the
// controller, the cluster DNS and the gateway; west: the link's
// ServiceAccount and its gateway), with every part a real coredns-mc
// process run as its Deployment's arguments and ServiceAccount say, as
// test/e2e/deploy runs them. The healthy fleet passes every check; each
// fault the tests make is named by the check it breaks, with a non-zero
// exit code.
//
// The Deployments have no pods here (no kubelet): the API server's proxy
// to the gateway's metrics Service reaches the real gateway process through
// an Endpoints object the test writes, at an address of this machine that
// is not loopback (Endpoints refuse loopback). The cluster DNS is asked at
// the process's address with --dns-server; the port-forward to a kube-dns
// pod, check's way without --dns-server, needs real nodes and is not
// exercised here.
package check_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"}, {Name: "west", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	wait = 90 * time.Second
	tick = 250 * time.Millisecond
	// ns holds west's export and east's mirrors of it.
	ns = "checked"
	// gatewayPod is the Pod the gateway's metrics Endpoints name, and the
	// $POD_NAME of east's gateway process.
	gatewayPod = "mcmirror-gateway-e2e"
)

// fleet is the installed and running east and west. East's parts are not
// a harness fleet's: what check reads is what deploy/*.yaml installs, so
// each runs with its Deployment's arguments and ServiceAccount. Tests stop
// and start gateways as pods that die and come back.
type fleet struct {
	dir string
	ca  *gatewaytest.CA
	// westIngress is west's gateway's ingress, east's --peer west.
	westIngress string
	// dnsAddr is east's cluster DNS, for check's --dns-server.
	dnsAddr string
	// eastGW is east's gateway's process, westGW west's gateway.
	eastGW *proc
	westGW *harness.Gateway
}

var (
	fleetOnce sync.Once
	theFleet  *fleet
	fleetErr  error
)

// setup installs and starts the fleet, once for the package, and has t
// print the environment's logs if it fails.
func setup(t *testing.T) *fleet {
	t.Helper()
	env.LogOnFailure(t)
	fleetOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// start runs on a goroutine of its own, which its first failure
		// ends, as a test's does; that failure is every test's.
		var failed setupFailure
		done := make(chan struct{})
		go func() {
			defer close(done)
			theFleet = start(ctx, &failed)
		}()
		<-done
		fleetErr = failed.err
	})
	require.NoError(t, fleetErr)
	return theFleet
}

// setupFailure is the require.TestingT of the fleet's set-up: it keeps the
// first failure and ends the goroutine that failed.
type setupFailure struct{ err error }

func (f *setupFailure) Errorf(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf(format, args...)
	}
}

func (f *setupFailure) FailNow() {
	if f.err == nil {
		f.err = errors.New("failed")
	}
	runtime.Goexit()
}

// proc is a process of the fleet that a test may stop and start again with
// the same arguments, as a pod that dies and comes back.
type proc struct {
	name string
	argv []string
	env  []string
	// readyURL answers 200 once the process is ready.
	readyURL string

	mu sync.Mutex
	p  *harness.Process
}

func (p *proc) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.p, err = env.Launch(p.name, p.env, p.argv...); err != nil {
		return err
	}
	for {
		if done, err := p.p.Exited(); done {
			return fmt.Errorf("%s exited: %v\n%s", p.name, err, p.p.Tail(30))
		}
		err := harness.GetOK(p.readyURL)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v\n%s", p.name, err, p.p.Tail(30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Stop()
}

// start installs deploy/*.yaml as deploy/README.md has it (east links west
// in gateway mode; each cluster is linked to by the other) and runs the
// parts.
func start(ctx context.Context, t require.TestingT) *fleet {
	east, west := env.Cluster("east"), env.Cluster("west")
	f := &fleet{dir: filepath.Join(env.Dir, "check-fleet")}
	require.NoError(t, os.MkdirAll(f.dir, 0o755))
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	// Certificates valid for 30 days: more than the 14 that check warns at.
	f.ca, err = gatewaytest.NewCA("mcmirror e2e root")
	require.NoError(t, err)
	valid := gatewaytest.Options{NotAfter: time.Now().Add(30 * 24 * time.Hour)}
	var eastTLS, westTLS gatewaytest.Files
	for c, files := range map[string]*gatewaytest.Files{"east": &eastTLS, "west": &westTLS} {
		require.NoError(t, os.MkdirAll(filepath.Join(f.dir, c), 0o755))
		*files, err = f.ca.IssueFiles(filepath.Join(f.dir, c), c, valid)
		require.NoError(t, err)
	}

	// West: linked to (remote-link.yaml), exports a StatefulSet, runs its
	// gateway's ingress.
	westLink, err := west.LinkKubeconfig(ctx)
	require.NoError(t, err)
	for _, c := range []*harness.Cluster{east, west} {
		require.NoError(t, c.Apply(ctx, harness.Namespace(ns)))
	}
	require.NoError(t, west.Apply(ctx, harness.StatefulSet(ns, "nginx-svc", "nginx-set", 1,
		map[string]string{labels.Exported: labels.ExportGateway})))
	f.westGW, err = env.LaunchGateway(west, harness.GatewayOptions{TLS: westTLS, Ingress: true,
		Args: []string{"--allow-cluster=east", "--drain-delay=0s"}})
	require.NoError(t, err)
	f.westIngress = f.westGW.IngressAddr

	// East: every file of deploy/, the DNS patched as kubeadm's CoreDNS
	// is, the gateway's certificate Secret, the link Secret, and the
	// gateway's --peer west.
	for _, file := range []string{"remote-link.yaml", "controller.yaml", "coredns.yaml", "gateway.yaml"} {
		text, err := os.ReadFile(harness.RepoPath("deploy", file))
		require.NoError(t, err)
		require.NoError(t, east.Apply(ctx, string(text)))
	}
	if _, err := east.Client.CoreV1().ServiceAccounts("kube-system").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	require.NoError(t, east.Apply(ctx, harness.KubeadmCoreDNSDeployment("kube-system", "registry.k8s.io/coredns/coredns:v1.11.3")))
	patch, err := os.ReadFile(harness.RepoPath("deploy", "patches", "coredns.yaml"))
	require.NoError(t, err)
	patchJSON, err := utilyaml.ToJSON(patch)
	require.NoError(t, err)
	_, err = east.Client.AppsV1().Deployments("kube-system").Patch(ctx, "coredns", types.JSONPatchType, patchJSON, metav1.PatchOptions{})
	require.NoError(t, err, "the DNS patch")
	tlsData := map[string][]byte{}
	for key, file := range map[string]string{"tls.crt": eastTLS.Cert, "tls.key": eastTLS.Key, "ca.crt": eastTLS.CA} {
		tlsData[key], err = os.ReadFile(file)
		require.NoError(t, err)
	}
	_, err = east.Client.CoreV1().Secrets("mcmirror").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "mcmirror-gateway-tls", Namespace: "mcmirror"}, Data: tlsData}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, createLinkSecret(ctx, westLink))
	require.NoError(t, setPeer(ctx, "west", f.westIngress))

	// What a gateway pod would be: a Pod at a non-loopback address of
	// this machine, behind the metrics Service's Endpoints, where east's
	// gateway process serves its metrics.
	host, err := env.HostAddress()
	require.NoError(t, err)
	metricsPort, err := harness.FreeTCPPort()
	require.NoError(t, err)
	gatewayEndpoints(ctx, t, host, metricsPort)

	// The parts, as their Deployments run them.
	d, err := east.Client.AppsV1().Deployments("mcmirror").Get(ctx, "mcmirror-gateway", metav1.GetOptions{})
	require.NoError(t, err)
	kc, err := east.ServiceAccountKubeconfigFile(ctx, f.dir, "mcmirror", d.Spec.Template.Spec.ServiceAccountName)
	require.NoError(t, err)
	eastIngress, err := harness.FreeTCPPort()
	require.NoError(t, err)
	metrics := net.JoinHostPort(host.String(), strconv.Itoa(metricsPort))
	argv := []string{bin}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch flag, _, _ := strings.Cut(a, "="); flag {
		case "--tls-cert", "--tls-key", "--tls-ca":
			continue // the files of eastTLS, below
		case "--ingress-address":
			a = flag + "=127.0.0.1:" + strconv.Itoa(eastIngress)
		case "--metrics-addr":
			a = flag + "=" + metrics
		}
		argv = append(argv, a)
	}
	// The egress ports on the host address too: loopback's 30000 and up
	// may be another package's gateway's, run beside this one.
	argv = append(append(argv, eastTLS.Args()...), "--kubeconfig="+kc, "--egress-bind-address="+host.String(),
		"--probe-interval=200ms", "--probe-timeout=1s",
		// A test stops it: no load balancer to drain from here.
		"--drain-delay=0s")
	f.eastGW = &proc{name: "east/gateway", argv: argv, env: []string{"POD_NAME=" + gatewayPod, "POD_NAMESPACE=mcmirror"},
		readyURL: "http://" + metrics + "/readyz"}
	require.NoError(t, f.eastGW.start(ctx))

	startController(ctx, t, f.dir, bin)
	f.dnsAddr = startDNS(ctx, t, f.dir)
	return f
}

// createLinkSecret writes east's link Secret for west, in the Linkerd
// format, as coredns-mc link and deploy/README.md make it.
func createLinkSecret(ctx context.Context, kubeconfig []byte) error {
	_, err := env.Cluster("east").Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Create(ctx,
		grant.LinkSecret(grant.Options{Cluster: "west"}, kubeconfig), metav1.CreateOptions{})
	return err
}

// setPeer sets east's gateway Deployment's --peer for cluster to addr, as
// an operator's edit of the Deployment (or of the chart's values) does.
func setPeer(ctx context.Context, cluster, addr string) error {
	return editGatewayArgs(ctx, func(args []string) []string {
		var out []string
		for _, a := range args {
			if strings.HasPrefix(a, "--peer="+cluster+"=") {
				a = "--peer=" + cluster + "=" + addr
			}
			out = append(out, a)
		}
		return out
	})
}

func editGatewayArgs(ctx context.Context, edit func([]string) []string) error {
	c := env.Cluster("east").Client.AppsV1().Deployments("mcmirror")
	for {
		d, err := c.Get(ctx, "mcmirror-gateway", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Args = edit(d.Spec.Template.Spec.Containers[0].Args)
		_, err = c.Update(ctx, d, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// gatewayEndpoints makes the API server's proxy to Service
// mcmirror/mcmirror-gateway-metrics reach host:port: a Pod whose status
// holds the address, and the Endpoints that the endpoints controller would
// write for it (east runs no kube-controller-manager, so nothing rewrites
// them).
func gatewayEndpoints(ctx context.Context, t require.TestingT, host netip.Addr, port int) {
	c := env.Cluster("east").Client.CoreV1()
	pod, err := c.Pods("mcmirror").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayPod, Namespace: "mcmirror"},
		Spec: corev1.PodSpec{NodeName: "no-node", ServiceAccountName: "mcmirror-gateway",
			Containers: []corev1.Container{{Name: "gateway", Image: "ghcr.io/mcmirror/coredns-mc:latest"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host.String(), PodIPs: []corev1.PodIP{{IP: host.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	pod, err = c.Pods("mcmirror").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = c.Endpoints("mcmirror").Create(ctx, &corev1.Endpoints{ //nolint:staticcheck // the API server's Service proxy reads Endpoints
		ObjectMeta: metav1.ObjectMeta{Name: "mcmirror-gateway-metrics", Namespace: "mcmirror"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: host.String(),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "mcmirror", Name: pod.Name, UID: pod.UID}}},
			Ports: []corev1.EndpointPort{{Name: "metrics", Port: int32(port), Protocol: corev1.ProtocolTCP}},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// startController runs the controller as its Deployment does.
func startController(ctx context.Context, t require.TestingT, dir, bin string) {
	east := env.Cluster("east")
	d, err := east.Client.AppsV1().Deployments("mcmirror").Get(ctx, "mcmirror-controller", metav1.GetOptions{})
	require.NoError(t, err)
	kc, err := east.ServiceAccountKubeconfigFile(ctx, dir, d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	require.NoError(t, err)
	port, err := harness.FreeTCPPort()
	require.NoError(t, err)
	metrics := "127.0.0.1:" + strconv.Itoa(port)
	argv := []string{bin}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--metrics-addr=") {
			a = "--metrics-addr=" + metrics
		}
		argv = append(argv, a)
	}
	// The mirrors of a link that goes go after 1 s rather than 10: a test
	// that relabels or deletes the link Secret leaves the next one less
	// to wait for.
	p := &proc{name: "east/controller", argv: append(argv, "--kubeconfig="+kc, "--link-removal-grace=1s"),
		readyURL: "http://" + metrics + "/healthz"}
	require.NoError(t, p.start(ctx))
}

// startDNS runs coredns-mc with the Corefile of the ConfigMap the patched
// DNS Deployment mounts, adapted to a process on this host (loopback and
// free ports, the ServiceAccount's kubeconfig), and returns its address.
func startDNS(ctx context.Context, t require.TestingT, dir string) string {
	east := env.Cluster("east")
	d, err := east.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	var cmName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm, err := east.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, cmName, metav1.GetOptions{})
	require.NoError(t, err)
	kc, err := east.ServiceAccountKubeconfigFile(ctx, dir, "kube-system", d.Spec.Template.Spec.ServiceAccountName)
	require.NoError(t, err)
	health, err := harness.FreeTCPPort()
	require.NoError(t, err)
	cf, err := harness.HostCorefile(cm.Data["Corefile"], kc, health)
	require.NoError(t, err, "ConfigMap kube-system/%s", cmName)
	s, err := env.LaunchDNS(ctx, "east/coredns", cf)
	require.NoError(t, err)
	return s.Addr
}

// ---- running check ----

// report is `coredns-mc check -o json`, as deploy/check.md documents it.
type report struct {
	FormatVersion int      `json:"formatVersion"`
	Cluster       string   `json:"cluster"`
	Server        string   `json:"server"`
	Results       []result `json:"results"`
	Summary       struct {
		OK   int `json:"ok"`
		Warn int `json:"warn"`
		Fail int `json:"fail"`
	} `json:"summary"`
}

type result struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// find returns the result of check id about subject.
func (r report) find(id, subject string) (result, bool) {
	for _, res := range r.Results {
		if res.ID == id && res.Subject == subject {
			return res, true
		}
	}
	return result{}, false
}

// notOK lists the results that are not ok, one a line.
func (r report) notOK() string {
	var b strings.Builder
	for _, res := range r.Results {
		if res.Status != "ok" {
			fmt.Fprintf(&b, "%s %s %s: %s (fix: %s)\n", res.Status, res.ID, res.Subject, res.Message, res.Fix)
		}
	}
	return b.String()
}

// check runs `coredns-mc check` against c, a real process, with the
// fleet's DNS address, and returns its exit code and its report (-o json)
// or its output (-o text).
func check(t testing.TB, c *harness.Cluster, f *fleet, args ...string) (int, report, string) {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := []string{"check", "--kubeconfig", c.Kubeconfig, "--timeout", "10s"}
	if f != nil {
		argv = append(argv, "--dns-server", f.dnsAddr)
	}
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	began := time.Now()
	out, err := cmd.Output()
	t.Logf("coredns-mc check of %s: %s (%.1fs)", c.Name, cmd.ProcessState, time.Since(began).Seconds())
	if _, exited := errors.AsType[*exec.ExitError](err); err != nil && !exited {
		t.Fatalf("coredns-mc %s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	code := cmd.ProcessState.ExitCode()
	if stderr.Len() > 0 {
		t.Logf("coredns-mc check's stderr:\n%s", stderr.String())
	}
	var rep report
	if !slices.Contains(args, "text") {
		require.NoError(t, json.Unmarshal(out, &rep), "the JSON report:\n%s", out)
	}
	return code, rep, string(out)
}

// healthy waits until check passes every check of east (exit 0, nothing
// but ok) and returns that report.
func healthy(t *testing.T, f *fleet) report {
	t.Helper()
	var rep report
	until(t, "check of east all ok", func() (bool, string) {
		var code int
		code, rep, _ = check(t, env.Cluster("east"), f, "-o", "json")
		ok := code == 0 && rep.Summary.Warn == 0 && rep.Summary.Fail == 0
		return ok, fmt.Sprintf("exit %d:\n%s", code, rep.notOK())
	})
	return rep
}

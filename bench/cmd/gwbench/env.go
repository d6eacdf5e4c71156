package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// What the clusters hold: in west, Service bench/bench, exported
// (mirror.linkerd.io/exported=true), selector-less, with a hand-written
// EndpointSlice pointing at the target pod; in east, its mirror
// bench/bench-west as the controller would make it, with the egress ports
// recorded in mcmirror.dev/egress-ports. No controller runs.
const (
	benchNS  = "bench"
	benchSvc = "bench"
)

// targetPorts are the Service ports (and the pod's), by name.
var targetPorts = []struct {
	name string
	port int32
}{{"sink", sinkPort}, {"echo", echoPort}, {"once", oncePort}}

// world is the part of the set-up every pair shares.
type world struct {
	env       *harness.Env
	tb        *fakeTB
	podIP     netip.Addr
	egress    map[int32]int // Service port -> egress port on 127.0.0.1
	tls       map[string]gatewaytest.Files
	pem       map[string]string // cluster -> certificate and key in one file (HAProxy's crt)
	certDir   string
	hap       *hapPorts // the HAProxy pair's ports, once chosen
	cipherGW  string    // negotiated by the gateway's ingress
	cipherHAP string    // by the HAProxy ingress
}

// fakeTB is the testing.TB the harness wants for RunPod: cleanups are kept
// for the end, a fatal error panics with tbFatal, caught by try.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

type tbFatal string

func (t *fakeTB) Helper()                        {}
func (t *fakeTB) Name() string                   { return "gwbench" }
func (t *fakeTB) Failed() bool                   { return false }
func (t *fakeTB) Logf(format string, a ...any)   { logf(format, a...) }
func (t *fakeTB) Fatalf(format string, a ...any) { panic(tbFatal(fmt.Sprintf(format, a...))) }
func (t *fakeTB) Fatal(a ...any)                 { panic(tbFatal(fmt.Sprint(a...))) }
func (t *fakeTB) Errorf(format string, a ...any) { panic(tbFatal(fmt.Sprintf(format, a...))) }

func (t *fakeTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// cleanup runs the cleanups, last first.
func (t *fakeTB) cleanup() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// try runs f and turns a fatal error of the fake testing.TB into an error.
func try(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if s, ok := r.(tbFatal); ok {
				err = fmt.Errorf("%s", string(s))
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}

// setUpWorld starts the target pod in west, writes the Services and the
// EndpointSlice, and issues the certificates.
func setUpWorld(ctx context.Context, cfg *config, env *harness.Env) (*world, error) {
	w := &world{env: env, tb: &fakeTB{}, egress: map[int32]int{}, tls: map[string]gatewaytest.Files{}, pem: map[string]string{}}
	west := env.Cluster("west")

	// The target: this binary, in a pod of west, pinned beside the client.
	var pod *harness.Pod
	err := try(func() {
		pod = west.RunPod(w.tb, "target-0", harness.Command{
			Argv: []string{"taskset", "-c", cfg.clientCPU, cfg.self, "target", "-size", strconv.Itoa(cfg.size)},
			Env:  []string{"GOMAXPROCS=1"},
		})
	})
	if err != nil {
		return w, fmt.Errorf("target pod: %w", err)
	}
	w.podIP = pod.IP
	if err := waitDial(net.JoinHostPort(w.podIP.String(), strconv.Itoa(echoPort)), 30*time.Second); err != nil {
		return w, fmt.Errorf("target pod at %s: %w\n%s", w.podIP, err, pod.Process.Tail(20))
	}

	if err := createWest(ctx, w); err != nil {
		return w, err
	}
	if err := createEast(ctx, w); err != nil {
		return w, err
	}

	// Certificates: one root, one certificate per cluster's gateway, the
	// same files for both pairs.
	w.certDir = filepath.Join(cfg.out, "gw-certs")
	if err := os.MkdirAll(w.certDir, 0o700); err != nil {
		return w, err
	}
	ca, err := gatewaytest.NewCA("gwbench root")
	if err != nil {
		return w, err
	}
	for _, c := range []string{"east", "west"} {
		f, err := ca.IssueFiles(w.certDir, c, gatewaytest.Options{})
		if err != nil {
			return w, err
		}
		w.tls[c] = f
		crt, err1 := os.ReadFile(f.Cert)
		key, err2 := os.ReadFile(f.Key)
		if err1 != nil || err2 != nil {
			return w, fmt.Errorf("%s: %v %v", c, err1, err2)
		}
		w.pem[c] = filepath.Join(w.certDir, c+".pem")
		if err := os.WriteFile(w.pem[c], append(crt, key...), 0o600); err != nil {
			return w, err
		}
	}
	return w, nil
}

// createWest writes west's exported Service and its EndpointSlice.
func createWest(ctx context.Context, w *world) error {
	c := w.env.Cluster("west").Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("west namespace: %w", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: benchSvc, Namespace: benchNS, Labels: map[string]string{labels.Exported: labels.ExportGateway}},
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: benchSvc + "-target", Namespace: benchNS, Labels: map[string]string{
			// Written by hand: it carries the export label itself.
			discoveryv1.LabelServiceName: benchSvc, discoveryv1.LabelManagedBy: "gwbench", labels.Exported: labels.ExportGateway}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{w.podIP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			Hostname:   ptr.To("target-0"),
		}},
	}
	for _, p := range targetPorts {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.name, Port: p.port, TargetPort: intstr.FromInt32(p.port), Protocol: corev1.ProtocolTCP})
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(p.port), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	if _, err := c.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("west Service: %w", err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("west EndpointSlice: %w", err)
	}
	return nil
}

// createEast writes east's mirror of bench/bench with an egress port for each
// of its ports, chosen free on 127.0.0.1.
func createEast(ctx context.Context, w *world) error {
	c := w.env.Cluster("east").Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("east namespace: %w", err)
	}
	egress := map[string]int32{}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: benchSvc + "-west", Namespace: benchNS, Labels: map[string]string{
		labels.ManagedBy: labels.ManagedByValue, labels.MirroredService: labels.MirroredServiceValue,
		labels.ClusterName: "west", labels.RemoteService: benchSvc,
	}}}
	for _, p := range targetPorts {
		port, err := harness.FreeTCPPort()
		if err != nil {
			return err
		}
		w.egress[p.port] = port
		egress[labels.EgressPortKey(p.port, "TCP")] = int32(port)
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.name, Port: p.port, Protocol: corev1.ProtocolTCP})
	}
	svc.Annotations = map[string]string{labels.EgressPorts: labels.FormatEgressPorts(egress)}
	if _, err := c.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("east mirror Service: %w", err)
	}
	return nil
}

// waitDial waits until addr accepts a connection.
func waitDial(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

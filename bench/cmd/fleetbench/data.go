package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/mcmirror/mcmirror/bench/internal/kube"
	"github.com/mcmirror/mcmirror/internal/fleet"
	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

const (
	// ns holds the exported Services, linkNS the link Secrets (as the
	// chart's linkNamespace) and the controllers' Leases, churnNS the
	// unexported churn.
	ns, linkNS, churnNS = "fleet", "mcmirror", "churn"
	// Endpoint addresses: 100.64.0.0/10, one per endpoint of the fleet;
	// changed ones from 198.18.0.0/15. Answer data only: nothing
	// connects to them.
	addrSpace   = 1 << 22
	changeSpace = 1 << 17
	// tokenTTL outlasts any run: the link tokens are not rotated.
	tokenTTL = 48 * time.Hour
)

var (
	addrBase   = netip.MustParseAddr("100.64.0.0").As4()
	changeBase = netip.MustParseAddr("198.18.0.0").As4()
)

// addrAt is the n-th address after base.
func addrAt(base [4]byte, n int) string {
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// fleetData is the exported data of every cluster and its current
// addresses: what every answer is checked against.
type fleetData struct {
	env      *harness.Env
	cfg      *config
	clusters []*harness.Cluster
	clients  []kubernetes.Interface
	mu       sync.Mutex
	changed  map[[3]int]string // (cluster, service, endpoint) → address, once changed
	changes  int
	// coldKubeconfigs are the extra links' (coldlinks.go), by link.
	coldKubeconfigs [][]byte
}

func newFleet(env *harness.Env, cfg *config) *fleetData {
	f := &fleetData{env: env, cfg: cfg, clusters: env.Clusters(), changed: map[[3]int]string{}}
	for _, c := range f.clusters {
		f.clients = append(f.clients, kube.FastClient(c.Config))
	}
	return f
}

func (f *fleetData) name(c int) string { return f.clusters[c].Name }

// addr is the current address of endpoint j of Service i of cluster c.
func (f *fleetData) addr(c, i, j int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.changed[[3]int{c, i, j}]; ok {
		return a
	}
	return addrAt(addrBase, (c*f.cfg.services+i)*f.cfg.endpoints+j)
}

func svcName(i int) string  { return fmt.Sprintf("s%d", i) }
func hostName(j int) string { return fmt.Sprintf("h%d", j) }
func endpointsHeld(cfg *config) int {
	return (cfg.clusters - 1) * cfg.services * cfg.endpoints
}

// each runs f for every cluster, a few at a time, and returns the first
// error.
func (f *fleetData) each(fn func(c int) error) error {
	var mu sync.Mutex
	var first error
	fleet.Each(len(f.clusters), 8, func(c int) {
		if err := fn(c); err != nil {
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("%s: %w", f.name(c), err)
			}
			mu.Unlock()
		}
	})
	return first
}

// link makes the full mesh as `coredns-mc link` does: in every cluster
// the read-only ServiceAccount of deploy/remote-link.yaml, and in every
// cluster a link Secret in linkNS for every other, holding a kubeconfig
// with that ServiceAccount's token.
func (f *fleetData) link() error {
	kcs := make([][]byte, len(f.clusters))
	if err := f.each(func(c int) error {
		var err error
		if kcs[c], err = f.clusters[c].LinkKubeconfigTTL(context.Background(), tokenTTL); err != nil {
			return err
		}
		for _, n := range []string{ns, churnNS} {
			if err := kube.Namespace(f.clients[c], n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := f.linkCold(kcs); err != nil {
		return err
	}
	return f.each(func(c int) error {
		for r := range f.clusters {
			if r == c {
				continue
			}
			s := grant.LinkSecret(grant.Options{Cluster: f.name(r), LinkNamespace: linkNS}, kcs[r])
			if _, err := f.clients[c].CoreV1().Secrets(linkNS).Create(context.Background(), s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("link Secret of %s: %w", f.name(r), err)
			}
		}
		return nil
	})
}

// load creates the exported Services of every cluster from the index
// first on (loadCluster).
func (f *fleetData) load(first int) error {
	return f.each(func(c int) error {
		if c < first {
			return nil
		}
		return f.loadCluster(c)
	})
}

// loadCluster creates cluster c's exported Services: headless, flat mode,
// each with one hand-made EndpointSlice of named ready endpoints that
// carries the export label itself, as a selector-less Service's slices
// must.
func (f *fleetData) loadCluster(c int) error {
	var mu sync.Mutex
	var first error
	fleet.Each(f.cfg.services, 16, func(i int) {
		if err := f.createService(c, i); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	})
	return first
}

func (f *fleetData) createService(c, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lbl := map[string]string{labels.Exported: labels.ExportFlat}
	return kube.Headless(ctx, f.clients[c], ns, svcName(i), "fleetbench", lbl, f.endpoints(c, i))
}

// endpoints are Service i of cluster c's, with the current addresses.
func (f *fleetData) endpoints(c, i int) []kube.Endpoint {
	eps := make([]kube.Endpoint, f.cfg.endpoints)
	for j := range eps {
		eps[j] = kube.Endpoint{Host: hostName(j), IP: f.addr(c, i, j)}
	}
	return eps
}

// change gives endpoint h0 of a random Service of cluster c a new address
// and writes its slice; it returns the Service, the address and when the
// request was sent.
func (f *fleetData) change(c int) (int, string, time.Time, error) {
	i := rand.IntN(f.cfg.services)
	f.mu.Lock()
	a := addrAt(changeBase, f.changes)
	f.changes++
	f.changed[[3]int{c, i, 0}] = a
	f.mu.Unlock()
	s := kube.Slice(ns, svcName(i), "fleetbench", map[string]string{labels.Exported: labels.ExportFlat},
		f.endpoints(c, i))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t := time.Now()
	_, err := f.clients[c].DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
	return i, a, t, err
}

// churn creates and deletes, in every cluster, rate pods and EndpointSlices
// per second of an unexported Service, until stop is closed; it returns the
// objects written (creates and deletes).
func (f *fleetData) churn(rate int, stop <-chan struct{}) int {
	if rate <= 0 {
		return 0
	}
	var mu sync.Mutex
	writes := 0
	var wg sync.WaitGroup
	epoch := time.Now().Unix() // names of this run of the churn
	for c := range f.clusters {
		wg.Go(func() {
			cs := f.clients[c]
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				n := churnOnce(cs, epoch, k)
				mu.Lock()
				writes += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return writes
}

// churnOnce creates pod and slice k of the unexported Service "busy" and
// deletes those of k-10: a Deployment's pods coming and going. It returns
// the writes that succeeded.
func churnOnce(cs kubernetes.Interface, epoch int64, k int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	name := fmt.Sprintf("busy-%d-%d", epoch, k)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: churnNS, Labels: map[string]string{"app": "busy"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busy"}}},
	}
	if _, err := cs.CoreV1().Pods(churnNS).Create(ctx, pod, metav1.CreateOptions{}); err == nil {
		n++
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: churnNS, Labels: map[string]string{discoveryv1.LabelServiceName: "busy", discoveryv1.LabelManagedBy: "fleetbench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addrAt(changeBase, changeSpace+k%changeSpace)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(churnNS).Create(ctx, sl, metav1.CreateOptions{}); err == nil {
		n++
	}
	if k >= 10 {
		old := fmt.Sprintf("busy-%d-%d", epoch, k-10)
		zero := int64(0)
		if cs.CoreV1().Pods(churnNS).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: &zero}) == nil {
			n++
		}
		if cs.DiscoveryV1().EndpointSlices(churnNS).Delete(ctx, old, metav1.DeleteOptions{}) == nil {
			n++
		}
	}
	return n
}

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcmirror/mcmirror/bench/internal/kube"
	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"
)

// With -cold-links K beyond the fleet's N−1, the direct-mode cold start
// is of a replica with K links: what a replica of a fleet of K+1 clusters
// lists when it starts, on a machine that runs fewer API servers. The
// extra links are more names for the same clusters: link x<k> reaches the
// cluster after the first, in turn, so each of the other clusters serves
// about K÷(N−1) of them, and the replica holds K×S Services of E
// endpoints. Their Secrets are in a namespace of their own in the first
// cluster, which only that replica follows.
const coldNS = "mcmirror-cold"

// coldLinks is the number of links of the cold-started replica in direct
// mode: -cold-links, or the fleet's N−1.
func (f *fleetData) coldLinks() int {
	if f.cfg.coldLinks > 0 {
		return f.cfg.coldLinks
	}
	return len(f.clusters) - 1
}

// coldName is the cluster name of extra link k.
func (f *fleetData) coldName(k int) string {
	return fmt.Sprintf("x%0*d", len(fmt.Sprint(f.cfg.coldLinks-1)), k)
}

// coldTarget is the cluster extra link k reaches.
func (f *fleetData) coldTarget(k int) int { return 1 + k%(len(f.clusters)-1) }

// linkCold writes the extra links' Secrets, with the fleet's kubeconfigs
// (kcs, by cluster).
func (f *fleetData) linkCold(kcs [][]byte) error {
	if f.cfg.coldLinks == 0 {
		return nil
	}
	if err := kube.Namespace(f.clients[0], coldNS); err != nil {
		return err
	}
	f.coldKubeconfigs = make([][]byte, f.cfg.coldLinks)
	for k := range f.cfg.coldLinks {
		f.coldKubeconfigs[k] = kcs[f.coldTarget(k)]
		s := grant.LinkSecret(grant.Options{Cluster: f.coldName(k), LinkNamespace: coldNS}, f.coldKubeconfigs[k])
		if _, err := f.clients[0].CoreV1().Secrets(coldNS).Create(context.Background(), s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("link Secret %s: %w", f.coldName(k), err)
		}
	}
	return nil
}

// coldComplete reports whether a replica with the extra links holds
// every name: per link and Service its name, the Services' -global
// names, every endpoint's address, and the local mirror Services (the
// first cluster's controller writes them for the fleet's own links).
func (f *fleetData) coldComplete(st linkState) bool {
	cfg := f.cfg
	return st.names == float64((cfg.coldLinks+1)*cfg.services) &&
		st.addrs == float64(cfg.coldLinks*cfg.services*cfg.endpoints) &&
		st.mirrors == float64((cfg.clusters-1)*cfg.services)
}

// coldLists times the extra links' lists alone, with client-go as the
// plugin makes them and nothing else: for every link at once, the
// Services and the EndpointSlices of each way a replica watches. The cold
// start's time after the lists is its own work: decoding into its
// stores, and the index.
func (f *fleetData) coldLists() (time.Duration, error) {
	export, err := k8slabels.Parse(labels.DefaultExportSelector)
	if err != nil {
		return 0, err
	}
	ways := []remote.Way{remote.Selected(export), remote.Stamped, remote.Federated}
	clients := make([]kubernetes.Interface, len(f.coldKubeconfigs))
	for k, kc := range f.coldKubeconfigs {
		rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			return 0, err
		}
		if clients[k], err = kubernetes.NewForConfig(rc); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	t := time.Now()
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	}
	for _, cs := range clients {
		for _, w := range ways {
			wg.Go(func() {
				_, err := cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: w.Services.String()})
				fail(err)
			})
			wg.Go(func() {
				_, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: w.Slices().String()})
				fail(err)
			})
		}
	}
	wg.Wait()
	return time.Since(t), first
}

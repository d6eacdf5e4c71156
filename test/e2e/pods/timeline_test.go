package pods

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mcmirror/mcmirror/test/harness"
)

// timeline records what east's cluster DNS pods and the kube-dns
// EndpointSlice did, and when (UTC, the clock the client pod's loop stamps
// its failures with): a lookup that went unanswered is placed among these
// lines. A line is written when what an object shows changes.
type timeline struct {
	mu    sync.Mutex
	lines []string
	last  map[string]string
}

// watchTimeline watches c's kube-system pods labelled k8s-app=kube-dns
// and the kube-dns EndpointSlices until ctx ends or the returned function
// is called, which returns the timeline.
func watchTimeline(ctx context.Context, c *harness.Cluster) (func() string, error) {
	ctx, cancel := context.WithCancel(ctx)
	tl := &timeline{last: map[string]string{}}
	pods, err := c.Client.CoreV1().Pods("kube-system").Watch(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		cancel()
		return nil, err
	}
	slices, err := c.Client.DiscoveryV1().EndpointSlices("kube-system").Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
	if err != nil {
		pods.Stop()
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	for _, w := range []watch.Interface{pods, slices} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					tl.record(ev)
				}
			}
		}()
	}
	return func() string {
		cancel()
		wg.Wait()
		tl.mu.Lock()
		defer tl.mu.Unlock()
		return strings.Join(tl.lines, "\n")
	}, nil
}

func (tl *timeline) record(ev watch.Event) {
	var key, state string
	switch o := ev.Object.(type) {
	case *corev1.Pod:
		key = "pod " + o.Name
		ready := "unready"
		if podReady(o) {
			ready = "ready"
		}
		state = fmt.Sprintf("%s %s %s restarts=%d", o.Status.PodIP, o.Status.Phase, ready, restarts(o))
		if o.DeletionTimestamp != nil {
			state += " terminating"
		}
	case *discoveryv1.EndpointSlice:
		key = "slice " + o.Name
		var eps []string
		for _, e := range o.Endpoints {
			flags := ""
			for _, f := range []struct {
				b    *bool
				name string
			}{{e.Conditions.Ready, "r"}, {e.Conditions.Serving, "s"}, {e.Conditions.Terminating, "t"}} {
				if f.b != nil && *f.b {
					flags += f.name
				}
			}
			eps = append(eps, strings.Join(e.Addresses, ",")+"("+flags+")")
		}
		sort.Strings(eps)
		state = strings.Join(eps, " ")
	default:
		return
	}
	if ev.Type == watch.Deleted {
		state = "deleted"
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[key] == state {
		return
	}
	tl.last[key] = state
	tl.lines = append(tl.lines, time.Now().UTC().Format("15:04:05.000")+" "+key+": "+state)
}

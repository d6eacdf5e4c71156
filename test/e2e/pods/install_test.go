package pods

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/internal/dnspatch"
	"github.com/mcmirror/mcmirror/test/harness"
)

var aliveRE = regexp.MustCompile(`"cluster":\s*"west"[^}]*"alive":\s*true|"alive":\s*true[^}]*"cluster":\s*"west"`)

var (
	installOnce sync.Once
	installErr  error
	installLog  string
	// installTook is how long the Install section ran; reportOnce logs
	// it in the first test that runs.
	installTook time.Duration
	reportOnce  sync.Once
	// dnsBefore is each cluster's DNS as it was before the install:
	// kube-system/coredns's pod template and its ConfigMap's data, which
	// the uninstall must give back exactly.
	dnsBefore = map[string]dnsState{}
)

// dnsState is what of a cluster's DNS the install may change.
type dnsState struct {
	template corev1.PodTemplateSpec
	data     map[string]string
}

// dnsNow reads c's DNS.
func dnsNow(ctx context.Context, c *harness.Cluster) (dnsState, error) {
	d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return dnsState{}, err
	}
	cm, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return dnsState{}, err
	}
	return dnsState{template: d.Spec.Template, data: cm.Data}, nil
}

// installed gives both clusters kubeadm's CoreDNS, then runs the Install
// section of deploy/README.md on them (harness.InstallFromREADME), once per
// package, and fails t if that failed.
func installed(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		for _, c := range env.Clusters() {
			if installErr = c.InstallKubeadmDNS(ctx); installErr != nil {
				return
			}
			if dnsBefore[c.Name], installErr = dnsNow(ctx, c); installErr != nil {
				return
			}
		}
		start := time.Now()
		installLog, installErr = env.InstallFromREADME(ctx)
		installTook = time.Since(start)
		// Step 8, "Check", says what the user sees: west's page, fetched
		// from east by name, and west alive in east's gateway's view.
		switch {
		case installErr != nil:
			return
		case !strings.Contains(installLog, "hello from a pod of west"):
			installErr = fmt.Errorf("step 8 did not print west's page")
			return
		case !aliveRE.MatchString(installLog):
			installErr = fmt.Errorf("step 8: east's gateway does not see west alive")
			return
		}
		// The install returns once the new DNS pods serve; the tests start
		// from the rollouts complete, the old pods gone.
		for _, c := range env.Clusters() {
			if _, installErr = dnsRolledOut(ctx, c); installErr != nil {
				return
			}
		}
	})
	if installErr != nil {
		t.Fatalf("deploy/README.md, Install, step by step: %v\n%s", installErr, installLog)
	}
	reportOnce.Do(func() {
		t.Logf("deploy/README.md, Install, step by step, steps 2 to 8: %s", installTook.Round(time.Second))
	})
}

// dnsRolledOut waits until c's kube-system/coredns is patched (it has the
// hook's annotation) and its rollout is complete: every replica of the
// patched template available, no old pod left. It returns when that was
// seen.
func dnsRolledOut(ctx context.Context, c *harness.Cluster) (time.Time, error) {
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if _, ok := d.Annotations[dnspatch.Annotation]; !ok {
			last = "not patched yet"
			return false, nil
		}
		r := dnspatch.RolloutOf(d)
		last = r.Message
		return r.Done, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: the rollout of the patched kube-system/coredns did not complete: %s", c.Name, last)
	}
	return time.Now(), nil
}

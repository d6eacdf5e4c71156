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

	"github.com/mcmirror/mcmirror/test/harness"
)

var aliveRE = regexp.MustCompile(`"cluster":\s*"west"[^}]*"alive":\s*true|"alive":\s*true[^}]*"cluster":\s*"west"`)

var (
	installOnce sync.Once
	installErr  error
	installLog  string
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
		installLog, installErr = env.InstallFromREADME(ctx)
		// Step 8, "Check", says what the user sees: west's page, fetched
		// from east by name, and west alive in east's gateway's view.
		switch {
		case installErr != nil:
		case !strings.Contains(installLog, "hello from a pod of west"):
			installErr = fmt.Errorf("step 8 did not print west's page")
		case !aliveRE.MatchString(installLog):
			installErr = fmt.Errorf("step 8: east's gateway does not see west alive")
		}
	})
	if installErr != nil {
		t.Fatalf("deploy/README.md, Install, step by step: %v\n%s", installErr, installLog)
	}
}

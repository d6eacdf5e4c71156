package pods

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/test/harness"
)

// What users add to the distributions' CoreDNS. k3s: its documented
// ConfigMap coredns-custom, one file its server block imports
// (*.override) and one server block of its own (*.server).
const k3sCustom = `
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns-custom, namespace: kube-system}
data:
  names.override: |
    template IN A override.k3s.test {
        answer "{{ .Name }} 60 IN A 10.9.8.2"
    }
  names.server: |
    server.k3s.test:53 {
        hosts {
            10.9.8.3 www.server.k3s.test
        }
    }
`

// rke2StubDomain: a stub domain in RKE2's Corefile (the chart's value
// servers, as a HelmChartConfig sets it), forwarded to a resolver of its
// own: a server block of the same pods, on port 1053.
const rke2StubDomain = `rke2.test:53 {
    errors
    cache 30
    forward . 127.0.0.1:1053
}
rke2.test:1053 {
    hosts {
        10.9.8.4 www.rke2.test
    }
}
`

// eksHosts: host entries in the EKS add-on's server block.
const eksHosts = `    hosts {
      10.9.8.5 db.eks.test
      fallthrough
    }
`

// readme is the lines of README.md's Install and uninstall blocks that
// act on one cluster $c: helm install, helm upgrade (the Install block's,
// after the peers) and helm uninstall; and the link of east to west.
type readme struct{ install, link, upgrade, uninstall string }

// readmeLines finds them.
func readmeLines(t *testing.T) readme {
	t.Helper()
	install, err := harness.RootREADMEBlock("install")
	require.NoError(t, err)
	uninstall, err := harness.RootREADMEBlock("uninstall")
	require.NoError(t, err)
	line := func(block, prefix string) string {
		t.Helper()
		var found []string
		for _, l := range strings.Split(block, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
				found = append(found, l)
			}
		}
		require.Len(t, found, 1, "README.md: lines that begin %q", prefix)
		return found[0]
	}
	return readme{
		install:   line(install, "helm --kube-context $c install mcmirror charts/mcmirror"),
		link:      line(install, "bin/coredns-mc link --context west --cluster west |"),
		upgrade:   line(install, "helm --kube-context $c upgrade mcmirror charts/mcmirror"),
		uninstall: line(uninstall, "helm --kube-context $c uninstall mcmirror"),
	}
}

// setArgs is --set for each value.
func setArgs(values []string) string {
	var b strings.Builder
	for _, v := range values {
		b.WriteString(" --set " + v)
	}
	return b.String()
}

// shell runs script in the directory of deploy/README.md's install
// (east.yaml), fails t if it fails, and logs how long it took.
func shell(t *testing.T, ctx context.Context, what, script string) string {
	t.Helper()
	start := time.Now()
	log, err := env.InstallShell(ctx, script)
	require.NoError(t, err, "%s:\n%s", what, log)
	t.Logf("%s: %s", what, time.Since(start).Round(100*time.Millisecond))
	return log
}

// layout is what of a CoreDNS layout the release may change: its
// Deployment's spec and annotations, its ConfigMaps' data.
type layout struct {
	spec        appsv1.DeploymentSpec
	annotations map[string]string
	data        map[string]map[string]string
}

// layoutNow reads l's objects in east.
func layoutNow(t *testing.T, ctx context.Context, l harness.CoreDNSLayout) layout {
	t.Helper()
	east := env.Cluster("east")
	d, err := east.Client.AppsV1().Deployments("kube-system").Get(ctx, l.Deployment, metav1.GetOptions{})
	require.NoError(t, err)
	out := layout{spec: d.Spec, annotations: d.Annotations, data: map[string]map[string]string{}}
	for _, name := range []string{l.ConfigMap, "coredns-custom"} {
		if cm, err := east.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, name, metav1.GetOptions{}); err == nil {
			out.data[name] = cm.Data
		}
	}
	require.Contains(t, out.data, l.ConfigMap)
	return out
}

// refusesRKE2AntiAffinity: on RKE2's CoreDNS as its chart publishes it (a
// node of its own for each DNS pod), east has no node to spare, and
// README.md's `helm install` line with RKE2's values fails in its own
// output, saying so and what to do, and changes nothing.
func refusesRKE2AntiAffinity(t *testing.T, ctx context.Context, rke2 harness.CoreDNSLayout, values []string, nodePort string, lines readme) {
	t.Helper()
	east := env.Cluster("east")
	require.NoError(t, east.InstallCoreDNS(ctx, rke2))
	before := layoutNow(t, ctx, rke2)
	log, err := env.InstallShell(ctx, "c=east\n"+lines.install+setArgs(append(values, nodePort)))
	require.Error(t, err, log)
	assert.Contains(t, log, "Error: INSTALLATION FAILED: execution error at (mcmirror/templates/dns-patch.yaml")
	assert.Contains(t, log, "kube-system/rke2-coredns-rke2-coredns requires a node of its own for each of its pods")
	assert.Contains(t, log, "Make that anti-affinity preferred (RKE2: a HelmChartConfig for rke2-coredns")
	assert.Contains(t, log, "nothing was changed")
	after := layoutNow(t, ctx, rke2)
	assert.True(t, apiequality.Semantic.DeepEqual(before.spec, after.spec), "RKE2's CoreDNS Deployment changed by a refused install")
	assert.Equal(t, before.data, after.data, "RKE2's CoreDNS ConfigMap changed by a refused install")
	out, err := env.InstallShell(ctx, "helm --kube-context east list -n mcmirror -a -q")
	require.NoError(t, err, out)
	assert.NotContains(t, out[strings.Index(out, "--- output"):], "mcmirror\n", "a release left by the refused install")
}

// restoreKubeadmLayout gives east kubeadm's CoreDNS and its release back,
// as the package's install left them (README.md's lines, the values file
// of deploy/README.md's install, east's gateway node port kept): east's
// release, if one is installed, goes first, its hook putting back the
// layout it patched.
func restoreKubeadmLayout(t *testing.T, lines readme, nodePort string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	start := time.Now()
	if log, err := env.InstallShell(ctx, "helm --kube-context east status mcmirror -n mcmirror"); err == nil {
		if log, err := env.InstallShell(ctx, "c=east\n"+lines.uninstall); err != nil {
			t.Errorf("restoring east: %v\n%s", err, log)
		}
	} else {
		t.Logf("east has no release to uninstall: %s", log[strings.Index(log, "--- output"):])
	}
	if err := east.RemoveCoreDNS(ctx); err != nil {
		t.Errorf("restoring east: %v", err)
		return
	}
	if err := east.InstallKubeadmDNS(ctx); err != nil {
		t.Errorf("restoring east: %v", err)
		return
	}
	now, err := dnsNow(ctx, east)
	if err != nil || !apiequality.Semantic.DeepEqual(now.template, dnsBefore["east"].template) || !apiequality.Semantic.DeepEqual(now.data, dnsBefore["east"].data) {
		t.Errorf("restoring east: kubeadm's CoreDNS is not what it was (%v)", err)
	}
	if log, err := env.InstallShell(ctx, "c=east\n"+lines.install+setArgs([]string{nodePort})+"\n"+lines.link); err != nil {
		t.Errorf("restoring east: %v\n%s", err, log)
		return
	}
	if _, err := dnsRolledOut(ctx, east); err != nil {
		t.Errorf("restoring east: %v", err)
	}
	t.Logf("east's kubeadm CoreDNS and release back: %s", time.Since(start).Round(time.Second))
}

// importMode checks the DNS pods of a release upgraded to dns.source=import
// (plugin/mcmirror/README.md, "Direct and import mode"): they answered
// west's name from the mirrors (servesMcmirror), the chart gave their
// ServiceAccount no access to the link Secrets (no Role
// mcmirror-coredns-link-secrets), and they watch no linked cluster: their
// link series name east alone.
func importMode(t *testing.T, ctx context.Context, pods []corev1.Pod) {
	t.Helper()
	east := env.Cluster("east")
	_, err := east.Client.RbacV1().Roles("mcmirror-links").Get(ctx, "mcmirror-coredns-link-secrets", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "Role mcmirror-links/mcmirror-coredns-link-secrets in import mode: %v", err)
	_, err = east.Client.RbacV1().RoleBindings("mcmirror-links").Get(ctx, "mcmirror-coredns-link-secrets", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "RoleBinding mcmirror-links/mcmirror-coredns-link-secrets in import mode: %v", err)
	linkSeries(t, ctx, pods, false)
}

// linkSeries checks each DNS pod's coredns_mcmirror_link_synced series:
// east's is 1, and west's is 1 (direct mode: the pod watches west) or
// absent (import mode).
func linkSeries(t *testing.T, ctx context.Context, pods []corev1.Pod, direct bool) {
	t.Helper()
	for _, p := range pods {
		out, err := inClient(ctx, "timeout 10 wget -qO- http://"+p.Status.PodIP+":9153/metrics")
		require.NoError(t, err, "%s's metrics: %s", p.Name, out)
		assert.Contains(t, out, `coredns_mcmirror_link_synced{cluster="east"} 1`, p.Name)
		var west []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "coredns_mcmirror_link_") && strings.Contains(line, `cluster="west"`) {
				west = append(west, line)
			}
		}
		if direct {
			assert.Contains(t, west, `coredns_mcmirror_link_synced{cluster="west"} 1`, "%s in direct mode", p.Name)
		} else {
			assert.Empty(t, west, "%s in import mode: link series of west", p.Name)
		}
	}
}

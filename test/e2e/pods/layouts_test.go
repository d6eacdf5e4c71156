package pods

import (
	"context"
	"fmt"
	"maps"
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
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/internal/dnspatch"
	"github.com/mcmirror/mcmirror/test/harness"
)

// layoutCase is a distribution's CoreDNS, what a user added to it, and
// what replace mode needs to be told of it.
type layoutCase struct {
	layout harness.CoreDNSLayout
	// set are the values the layout needs (--set).
	set []string
	// names are names the cluster's own Corefile answers, and the address
	// of each: still answered with mcmirror installed, and after.
	names map[string]string
	// importMode: the upgrade switches the DNS to dns.source=import.
	importMode bool
}

// TestCoreDNSLayouts installs, upgrades and uninstalls east's release on
// the CoreDNS of k3s, RKE2 and the EKS add-on, each laid out in turn as
// its distribution publishes it (harness.CoreDNSLayout names the sources)
// with what users add to it: k3s's custom files (an .override in its
// server block, a .server block of their own) and the NodeHosts its server
// writes, a stub domain in RKE2's, host entries in EKS's. For each: the
// layout's own DNS answers those names and not mcmirror's; README.md's
// `helm install` line with east's values and the layout's, and its link
// line, make east's pods resolve west's web by its -global name (only
// mcmirror answers it) through the cluster DNS, and each new DNS pod
// answers that name, kubernetes.default's and every name of the cluster's
// Corefile; `helm upgrade` with a changed DNS value rolls the DNS pods, and
// the new ones answer the same (on EKS's, the upgrade also switches the
// DNS to dns.source=import: importMode); README.md's `helm uninstall` line gives the
// Deployment's spec and the ConfigMaps back exactly as they were, and the
// cluster DNS answers the cluster's names again and no longer mcmirror's.
// RKE2's chart requires a node of its own per DNS pod: here, on one node,
// `helm install` refuses it and changes nothing, and the test then gives
// it a preferred anti-affinity, as RKE2's HelmChartConfig can. East gets
// kubeadm's CoreDNS and its release back at the end.
func TestCoreDNSLayouts(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	started := time.Now()

	// West's values name east's gateway by its node port: every install
	// here keeps it.
	gw, err := east.Client.CoreV1().Services("mcmirror").Get(ctx, "mcmirror-gateway", metav1.GetOptions{})
	require.NoError(t, err)
	nodePort := fmt.Sprintf("gateway.service.nodePort=%d", gw.Spec.Ports[0].NodePort)
	lines := readmeLines(t)

	// kubernetes.default, and the node as k3s's NodeHosts names it.
	k8s, err := east.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := east.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 1)
	node := nodes.Items[0]
	nodeIP := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	require.NotEmpty(t, nodeIP, "node %s has no InternalIP", node.Name)

	// The release goes first: its hook puts kubeadm's CoreDNS back.
	shell(t, ctx, "uninstall east's release", "c=east\n"+lines.uninstall)
	t.Cleanup(func() { restoreKubeadmLayout(t, lines, nodePort) })

	k3s, err := harness.K3sCoreDNS(fmt.Sprintf("%s %s\n", nodeIP, node.Name))
	require.NoError(t, err)
	k3s.Objects = k3sCustom
	rke2, err := harness.RKE2CoreDNS("")
	require.NoError(t, err)
	eks, err := harness.EKSCoreDNS()
	require.NoError(t, err)
	eks.Corefile, err = harness.ReplaceOnce(eks.Corefile, "    ready\n", "    ready\n"+eksHosts)
	require.NoError(t, err)
	rke2Values := []string{"dns.coredns.deployment=rke2-coredns-rke2-coredns", "dns.coredns.configMap=rke2-coredns-rke2-coredns"}

	phase := time.Now()
	refusesRKE2AntiAffinity(t, ctx, rke2, rke2Values, nodePort, lines)
	t.Logf("RKE2's chart as published: refused in %s", time.Since(phase).Round(time.Second))

	rke2, err = harness.RKE2CoreDNS(harness.RKE2PreferredAffinity)
	require.NoError(t, err)
	rke2.Corefile += rke2StubDomain
	for _, c := range []layoutCase{
		{layout: k3s, names: map[string]string{
			"www.override.k3s.test": "10.9.8.2", "www.server.k3s.test": "10.9.8.3", node.Name: nodeIP,
		}},
		{layout: rke2, set: rke2Values, names: map[string]string{"www.rke2.test": "10.9.8.4"}},
		{layout: eks, names: map[string]string{"db.eks.test": "10.9.8.5"}, importMode: true},
	} {
		c.names["kubernetes.default.svc.cluster.local"] = k8s.Spec.ClusterIP
		phase := time.Now()
		installUpgradeUninstall(t, ctx, c, append(c.set, nodePort), lines)
		t.Logf("%s: laid out, installed, upgraded and uninstalled in %s", c.layout.Name, time.Since(phase).Round(time.Second))
	}
	t.Logf("the three layouts: %s (load average %s)", time.Since(started).Round(time.Second), loadAverage())
}

// installUpgradeUninstall lays out east's CoreDNS as c says, and runs
// east's release through install, upgrade and uninstall on it.
func installUpgradeUninstall(t *testing.T, ctx context.Context, c layoutCase, set []string, lines readme) {
	t.Helper()
	east := env.Cluster("east")
	l := c.layout
	require.NoError(t, east.InstallCoreDNS(ctx, l))
	before := layoutNow(t, ctx, l)
	// The layout's own DNS: the cluster's names, and not mcmirror's.
	answers(t, ctx, c.names, "")
	addrs, _ := lookup(ctx, globalName, "")
	require.Empty(t, addrs, "%s: %s answered before the install", l.Name, globalName)

	shell(t, ctx, l.Name+": helm install", "c=east\n"+lines.install+" "+setArgs(set)+"\n"+lines.link)
	patched, pods := servesMcmirror(t, ctx, c, 0)
	if c.importMode {
		linkSeries(t, ctx, pods, true)
	}

	// A DNS value changed: the DNS pods roll, the new ones answer.
	upgrade := append(set, "dns.resources.requests.memory=100Mi")
	if c.importMode {
		upgrade = append(upgrade, "dns.source=import")
	}
	shell(t, ctx, l.Name+": helm upgrade", "c=east\n"+lines.upgrade+" "+setArgs(upgrade))
	_, pods = servesMcmirror(t, ctx, c, patched)
	for _, p := range pods {
		assert.Equal(t, "100Mi", p.Spec.Containers[0].Resources.Requests.Memory().String(), "%s: pod %s", l.Name, p.Name)
	}
	if c.importMode {
		importMode(t, ctx, pods)
	}

	shell(t, ctx, l.Name+": helm uninstall", "c=east\n"+lines.uninstall)
	after := layoutNow(t, ctx, l)
	assert.True(t, apiequality.Semantic.DeepEqual(before.spec, after.spec),
		"%s: kube-system/%s's spec is not what it was before the install:\nbefore %s\nnow    %s",
		l.Name, l.Deployment, mustJSON(t, before.spec), mustJSON(t, after.spec))
	assert.Equal(t, before.data, after.data, "%s: the ConfigMaps of its CoreDNS", l.Name)
	assert.NotContains(t, after.annotations, dnspatch.Annotation, l.Name)
	_, err := east.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "%s: ConfigMap coredns-mcmirror: %v", l.Name, err)
	answers(t, ctx, c.names, "")
	var last []string
	assert.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last, _ = lookup(ctx, globalName, "")
		return len(last) == 0, nil
	}), "%s: %s still answered after the uninstall: %v", l.Name, globalName, last)
}

// globalName is west's web by the name only mcmirror answers: the union of
// the clusters that export it.
const globalName = "web-global.default.svc.cluster.local"

// servesMcmirror waits until the Deployment of c's CoreDNS is patched at a
// generation after since and the pods of its template are Ready (the hook
// returned when they were), then checks that east's cluster DNS answers
// globalName with the ClusterIP of west's web's mirror, and that each of
// those pods answers it and c's names. It returns the generation, and the
// pods.
func servesMcmirror(t *testing.T, ctx context.Context, c layoutCase, since int64) (int64, []corev1.Pod) {
	t.Helper()
	east := env.Cluster("east")
	l := c.layout
	var d *appsv1.Deployment
	var pods []corev1.Pod
	var last string
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		d, err = east.Client.AppsV1().Deployments("kube-system").Get(ctx, l.Deployment, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if _, ok := d.Annotations[dnspatch.Annotation]; !ok || d.Generation <= since {
			last = fmt.Sprintf("generation %d, annotation %s: %t", d.Generation, dnspatch.Annotation, ok)
			return false, nil
		}
		pods, last = templatePods(ctx, d)
		return last == "", nil
	}), "%s: the patched pods of kube-system/%s: %s", l.Name, l.Deployment, last)

	// Through the cluster DNS Service: the old pods, which know no name
	// of mcmirror's, answer beside the new ones until the rollout
	// completes. The mirror's ClusterIP is read again at each try: east's
	// controller, new, may make the mirror again once the link is back.
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		svc, err := east.Client.CoreV1().Services("default").Get(ctx, "web-west", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		addrs, err := lookup(ctx, globalName, "")
		last = fmt.Sprintf("%v (%v), web-west's ClusterIP %s", addrs, err, svc.Spec.ClusterIP)
		return len(addrs) == 1 && addrs[0] == svc.Spec.ClusterIP, nil
	}), "%s: east's pods never resolved %s: %s", l.Name, globalName, last)
	for _, p := range pods {
		names := map[string]string{globalName: ""}
		maps.Copy(names, c.names)
		answers(t, ctx, names, p.Status.PodIP)
	}
	return d.Generation, pods
}

// templatePods returns the pods of d's current template (its newest
// ReplicaSet's), once as many as d wants are Ready; else what it waits for.
func templatePods(ctx context.Context, d *appsv1.Deployment) ([]corev1.Pod, string) {
	east := env.Cluster("east")
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err.Error()
	}
	rss, err := east.Client.AppsV1().ReplicaSets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err.Error()
	}
	hash := ""
	for _, rs := range rss.Items {
		if metav1.IsControlledBy(&rs, d) && rs.Annotations["deployment.kubernetes.io/revision"] == d.Annotations["deployment.kubernetes.io/revision"] &&
			apiequality.Semantic.DeepEqual(rs.Spec.Template.Spec, d.Spec.Template.Spec) {
			hash = rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		}
	}
	if hash == "" {
		return nil, "no ReplicaSet of the current template yet"
	}
	pods, err := east.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: sel.String() + "," + appsv1.DefaultDeploymentUniqueLabelKey + "=" + hash})
	if err != nil {
		return nil, err.Error()
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			ready = append(ready, p)
		}
	}
	want := 1
	if d.Spec.Replicas != nil {
		want = int(*d.Spec.Replicas)
	}
	if len(ready) < want {
		return nil, fmt.Sprintf("%d of %d pods of template %s Ready", len(ready), want, hash)
	}
	return ready, ""
}

// answers checks that server (a DNS pod's address; "": the cluster DNS of
// the client's resolv.conf) answers each name with its address (any
// address, for ""), trying again for a while: a pod just Ready, an
// endpoint kube-proxy has not programmed yet.
func answers(t *testing.T, ctx context.Context, names map[string]string, server string) {
	t.Helper()
	for name, want := range names {
		var addrs []string
		var err error
		werr := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			addrs, err = lookup(ctx, name, server)
			return len(addrs) > 0 && (want == "" || (len(addrs) == 1 && addrs[0] == want)), nil
		})
		assert.NoError(t, werr, "%s at %q: want %q, have %v (%v)", name, server, want, addrs, err)
	}
}

// lookup asks server ("": the cluster DNS) from east's client pod for the
// A records of name, exactly (no search path), and returns the addresses
// of the answer.
func lookup(ctx context.Context, name, server string) ([]string, error) {
	out, err := inClient(ctx, fmt.Sprintf("timeout 5 nslookup -type=A %s. %s", name, server))
	var addrs []string
	answer := false
	for _, line := range strings.Split(out, "\n") {
		switch f := strings.Fields(line); {
		case len(f) >= 2 && f[0] == "Name:":
			answer = true
		case answer && len(f) >= 2 && f[0] == "Address:":
			addrs = append(addrs, f[len(f)-1])
		}
	}
	if err != nil {
		err = fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
	}
	return addrs, err
}

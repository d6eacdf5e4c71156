package harness

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// CoreDNSLayout is the cluster DNS of a Kubernetes distribution, laid out
// in kube-system as its published manifest lays it out: the Deployment and
// the ConfigMap of its Corefile (the ServiceAccount coredns, its RBAC and
// the Service kube-dns are kubeadm's, InstallKubeadmDNS's: the same names
// in each of these distributions but RKE2, whose Service is named as its
// Deployment; the Service is no part of what replace mode reads).
type CoreDNSLayout struct {
	// Name is the distribution's.
	Name string
	// Deployment and ConfigMap are the names of the CoreDNS Deployment and
	// of the ConfigMap of its Corefile.
	Deployment, ConfigMap string
	// Image is the image the manifest names. On the node it is the
	// project's image under that name, as with KubeadmCoreDNSImage.
	Image string
	// Corefile is the distribution's, the ConfigMap's key Corefile: a test
	// may add to it what a user adds.
	Corefile string
	// Data are the ConfigMap's other keys (k3s's NodeHosts, which its
	// server writes).
	Data map[string]string
	// Objects are more objects of a user's, applied with the layout
	// (k3s's ConfigMap coredns-custom, say).
	Objects string
	// deployment is the Deployment's manifest, formatted with the image,
	// a checksum of the ConfigMap (RKE2's pod template annotation) and
	// affinity.
	deployment, affinity string
}

// Manifest is the layout's ConfigMap and Deployment, as InstallCoreDNS
// applies them. One difference from the published manifests, as in
// InstallKubeadmDNS: their images bind port 53 through a file capability,
// which the project's image does not carry, so the pod template gets the
// namespaced sysctl that lets a non-root process bind it.
func (l CoreDNSLayout) Manifest() (string, error) {
	cm := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: l.ConfigMap, Namespace: "kube-system"},
		Data:       map[string]string{"Corefile": l.Corefile},
	}
	for k, v := range l.Data {
		cm.Data[k] = v
	}
	b, err := yaml.Marshal(cm)
	if err != nil {
		return "", err
	}
	d, err := withPort53Sysctl(l.Name, fmt.Sprintf(l.deployment, l.Image, fmt.Sprintf("%x", sha256.Sum256(b)), l.affinity))
	if err != nil {
		return "", err
	}
	return string(b) + "---\n" + d + "---\n" + l.Objects, nil
}

// publishedCorefile is the Corefile of internal/corefile's testdata named
// name: the distributions' own, which its unit tests edit.
func publishedCorefile(name string) (string, error) {
	b, err := os.ReadFile(RepoPath("internal", "corefile", "testdata", name+".Corefile"))
	return string(b), err
}

// K3sCoreDNS is k3s's CoreDNS (k3s-io/k3s, manifests/coredns.yaml at
// commit 66c487bd3cc993b7ae435490fc4f5bf87a442f1a): Deployment coredns
// with a second volume, custom-config-volume (the optional ConfigMap
// coredns-custom, mounted at /etc/coredns/custom), both keys of its
// ConfigMap projected by items, and a Corefile that imports
// /etc/coredns/custom/*.override inside its server block and *.server
// after it. nodeHosts is the ConfigMap's NodeHosts, which the k3s server
// writes ("IP NAME" per node).
func K3sCoreDNS(nodeHosts string) (CoreDNSLayout, error) {
	cf, err := publishedCorefile("k3s")
	return CoreDNSLayout{Name: "k3s", Deployment: "coredns", ConfigMap: "coredns",
		Image: "docker.io/rancher/mirrored-coredns-coredns:1.11.3", Corefile: cf,
		Data: map[string]string{"NodeHosts": nodeHosts}, deployment: k3sDeployment}, err
}

// RKE2CoreDNS is RKE2's CoreDNS: the rke2-coredns chart of
// rancher/rke2-charts (packages/rke2-coredns: charts/templates/
// deployment.yaml at commit 90e1809d472170daf6816cfdce178e35a87e4e1f with
// RKE2's values, generated-changes/patch/values.yaml.patch at commit
// 006adb54d003ad4e1d608dd383ca952e22df0d8e) rendered as RKE2 installs it,
// release rke2-coredns: Deployment and ConfigMap rke2-coredns-rke2-coredns,
// ServiceAccount coredns, no replicas (its autoscaler sets them; it is not
// run here: one replica), and a required pod anti-affinity per node.
// affinity, when not empty, is the chart's value affinity as a
// HelmChartConfig sets it (YAML, indented for the pod spec), in place of
// RKE2's.
func RKE2CoreDNS(affinity string) (CoreDNSLayout, error) {
	cf, err := publishedCorefile("rke2")
	if affinity == "" {
		affinity = rke2Affinity
	}
	return CoreDNSLayout{Name: "RKE2", Deployment: "rke2-coredns-rke2-coredns", ConfigMap: "rke2-coredns-rke2-coredns",
		Image: "docker.io/rancher/hardened-coredns:v1.10.1-build20230607", Corefile: cf,
		deployment: rke2Deployment, affinity: affinity}, err
}

// EKSCoreDNS is the EKS add-on's CoreDNS as eksctl publishes it
// (eksctl-io/eksctl, pkg/addons/default/assets/coredns-1.32.json at commit
// 1105014250ab4f0bc6914267af998a119aef9d5f): Deployment coredns of two
// replicas, volume config-volume with items, a selector and pod labels
// with eks.amazonaws.com/component.
func EKSCoreDNS() (CoreDNSLayout, error) {
	cf, err := publishedCorefile("eks")
	return CoreDNSLayout{Name: "EKS", Deployment: "coredns", ConfigMap: "coredns",
		Image: "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.11.4-eksbuild.10", Corefile: cf,
		deployment: eksDeployment}, err
}

// coreDNSObjects are the objects of every layout's CoreDNS that
// RemoveCoreDNS deletes: the Deployments and the ConfigMaps (k3s's
// coredns-custom is a user's).
var coreDNSObjects = struct{ deployments, configMaps []string }{
	deployments: []string{"coredns", "rke2-coredns-rke2-coredns"},
	configMaps:  []string{"coredns", "coredns-custom", "rke2-coredns-rke2-coredns"},
}

// RemoveCoreDNS deletes the cluster DNS's Deployment and ConfigMaps of
// every layout (kubeadm's and CoreDNSLayout's), and waits until the
// Deployments and their pods are gone.
func (c *Cluster) RemoveCoreDNS(ctx context.Context) error {
	fg := metav1.DeletePropagationForeground
	for _, name := range coreDNSObjects.deployments {
		err := c.Client.AppsV1().Deployments("kube-system").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: delete deployment kube-system/%s: %w", c.Name, name, err)
		}
	}
	for _, name := range coreDNSObjects.configMaps {
		err := c.Client.CoreV1().ConfigMaps("kube-system").Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: delete configmap kube-system/%s: %w", c.Name, name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.env.poll(ctx, c.Name+": the cluster DNS's Deployments and pods gone", func(ctx context.Context) (bool, error) {
		for _, name := range coreDNSObjects.deployments {
			if _, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// InstallCoreDNS replaces the cluster DNS of a cluster with a real node
// (RemoveCoreDNS) by the layout l, the project's image tagged as l.Image
// on the node, and waits until its Deployment is available.
func (c *Cluster) InstallCoreDNS(ctx context.Context, l CoreDNSLayout) error {
	if c.real == nil {
		return fmt.Errorf("%s: InstallCoreDNS needs a real node", c.Name)
	}
	manifest, err := l.Manifest()
	if err != nil {
		return err
	}
	if err := c.tagProjectImage(ctx, l.Image); err != nil {
		return err
	}
	if err := c.RemoveCoreDNS(ctx); err != nil {
		return err
	}
	if err := c.Apply(ctx, manifest); err != nil {
		return err
	}
	return c.waitDNSAvailable(ctx, l.Deployment, l.Name)
}

// tagProjectImage stores the project's image under name in the node's
// containerd as well.
func (c *Cluster) tagProjectImage(ctx context.Context, name string) error {
	imgs, err := LocalImages()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "ctr", "-a", c.real.sock, "-n", "k8s.io", "images", "tag", "--force",
		imgs.CorednsMC, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: tag %s: %v: %s", c.Name, name, err, out)
	}
	return nil
}

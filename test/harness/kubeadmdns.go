package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeadmCoreDNSImage is the image kubeadm v1.32 runs its CoreDNS with. On
// real nodes it is the project's image under that name: coredns-mc is
// CoreDNS with every standard plugin, and a Corefile without mcmirror makes
// it the stock server.
const KubeadmCoreDNSImage = "registry.k8s.io/coredns/coredns:v1.11.3"

// InstallKubeadmDNS gives a cluster with a real node the cluster DNS that
// kubeadm v1.32 installs, object for object (ServiceAccount, ClusterRole,
// ConfigMap coredns with kubeadm's Corefile, Deployment coredns of two
// replicas, Service kube-dns at DNSServiceIP), and waits until it serves.
// One difference: kubeadm's image binds port 53 as a non-root user through
// a file capability, which the project's image does not carry (a file
// capability makes exec fail where a pod drops every capability), so the
// pod sets the namespaced sysctl that lets it bind the port instead.
func (c *Cluster) InstallKubeadmDNS(ctx context.Context) error {
	if c.real == nil {
		return fmt.Errorf("%s: InstallKubeadmDNS needs a real node", c.Name)
	}
	if err := c.tagProjectImage(ctx, KubeadmCoreDNSImage); err != nil {
		return err
	}
	deployment, err := withPort53Sysctl("kubeadm", KubeadmCoreDNSDeployment("kube-system", KubeadmCoreDNSImage))
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, fmt.Sprintf(kubeadmDNS, c.DNSServiceIP())+"---\n"+deployment); err != nil {
		return err
	}
	return c.waitDNSAvailable(ctx, "coredns", "kubeadm")
}

// withPort53Sysctl adds to the pod template of the CoreDNS Deployment
// manifest deployment of distribution dist the namespaced sysctl that lets
// a non-root process bind port 53: it stands in for the file capability
// of the published images, which the project's image does not carry.
func withPort53Sysctl(dist, deployment string) (string, error) {
	const anchor = "      serviceAccountName: coredns\n"
	d, err := ReplaceOnce(deployment, anchor, anchor+
		"      securityContext:\n"+
		"        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: \"53\"}]\n")
	if err != nil {
		return "", fmt.Errorf("harness: the sysctl in %s's CoreDNS Deployment: %w", dist, err)
	}
	return d, nil
}

// waitDNSAvailable waits up to two minutes until the CoreDNS Deployment
// kube-system/name of distribution dist is available.
func (c *Cluster) waitDNSAvailable(ctx context.Context, name, dist string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.env.poll(ctx, c.Name+"/"+name+" ("+dist+")", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, name, metav1.GetOptions{})
		return err == nil && deploymentAvailable(d), nil
	})
}

// deploymentAvailable reports whether every replica of d is updated and
// available.
func deploymentAvailable(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}

// kubeadmDNS is kubeadm v1.32's CoreDNS (cmd/kubeadm/app/phases/addons/dns)
// but its Deployment (kubeadmDeployment): ServiceAccount, RBAC, ConfigMap
// and Service. Formatted with the DNS Service's ClusterIP.
const kubeadmDNS = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        forward . /etc/resolv.conf {
           max_concurrent 1000
        }
        cache 30 {
           disable success cluster.local
           disable denial cluster.local
        }
        loop
        reload
        loadbalance
    }
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS}
  annotations: {prometheus.io/port: "9153", prometheus.io/scrape: "true"}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %[1]s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}
`

// KubeadmCoreDNSDeployment is kubeadm v1.32's CoreDNS Deployment, object
// for object, in namespace ns with image.
func KubeadmCoreDNSDeployment(ns, image string) string {
	return fmt.Sprintf(kubeadmDeployment, ns, image)
}

// ReplaceOnce returns manifest with, for each old, new pair of edits in
// turn, old replaced by new; an old that does not stand exactly once in the
// manifest as edited so far is an error, so that an edit of kubeadm's
// Deployment that no longer finds its place fails instead of leaving the
// manifest as it was.
func ReplaceOnce(manifest string, edits ...string) (string, error) {
	if len(edits)%2 != 0 {
		return "", fmt.Errorf("harness: ReplaceOnce wants old, new pairs, not %d strings", len(edits))
	}
	for i := 0; i < len(edits); i += 2 {
		if n := strings.Count(manifest, edits[i]); n != 1 {
			return "", fmt.Errorf("harness: %q stands %d times in the manifest, not once", edits[i], n)
		}
		manifest = strings.Replace(manifest, edits[i], edits[i+1], 1)
	}
	return manifest, nil
}

// kubeadmDeployment is kubeadm v1.32's CoreDNS Deployment. Formatted with
// the namespace and the image.
const kubeadmDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: %[1]s
  labels: {k8s-app: kube-dns}
spec:
  replicas: 2
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              labelSelector:
                matchExpressions: [{key: k8s-app, operator: In, values: [kube-dns]}]
              topologyKey: kubernetes.io/hostname
      tolerations:
      - {key: CriticalAddonsOnly, operator: Exists}
      - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: coredns
        image: %[2]s
        imagePullPolicy: IfNotPresent
        resources:
          limits: {memory: 170Mi}
          requests: {cpu: 100m, memory: 70Mi}
        args: [-conf, /etc/coredns/Corefile]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns, readOnly: true}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            add: [NET_BIND_SERVICE]
            drop: [ALL]
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
      dnsPolicy: Default
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items: [{key: Corefile, path: Corefile}]
`

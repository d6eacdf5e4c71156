package harness

import (
	"fmt"
	"slices"
	"strings"
)

// ContainerPort is a named port of a workload's containers, exposed by its
// Service under the same name and number.
type ContainerPort struct {
	Name string
	Port int
}

// StatefulSet returns a manifest: a headless Service svc with port http 80
// and the given labels (e.g. the export label), and StatefulSet set of
// replicas pods behind it, bound to the simulated node. The namespace must
// exist.
func StatefulSet(ns, svc, set string, replicas int, svcLabels map[string]string) string {
	return StatefulSetWithPorts(ns, svc, set, replicas, svcLabels, ContainerPort{Name: "http", Port: 80})
}

// StatefulSetWithPorts is StatefulSet with the given ports. In a cluster
// with a data plane, every pod answers on each: HTTP on ports named http or
// http-*, a TCP greeting and echo on the others.
func StatefulSetWithPorts(ns, svc, set string, replicas int, svcLabels map[string]string, ports ...ContainerPort) string {
	var sp, cp []string
	for _, p := range ports {
		sp = append(sp, fmt.Sprintf("{name: %s, port: %d}", p.Name, p.Port))
		cp = append(cp, fmt.Sprintf("{name: %s, containerPort: %d}", p.Name, p.Port))
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: %[5]s}
spec:
  clusterIP: None
  selector: {app: %[2]s}
  ports: [%[7]s]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: %[3]s, namespace: %[1]s}
spec:
  serviceName: %[2]s
  replicas: %[4]d
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      nodeName: %[6]s
      containers: [{name: nginx, image: nginx, ports: [%[8]s]}]
`, ns, svc, set, replicas, flowMap(svcLabels), NodeName, strings.Join(sp, ", "), strings.Join(cp, ", "))
}

// ClusterIPService returns the manifest of a ClusterIP Service name with
// the given labels (e.g. the export label) and one port http, in front of
// the pods labelled app=name. The namespace must exist.
func ClusterIPService(ns, name string, port int, svcLabels map[string]string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: %[4]s}
spec:
  selector: {app: %[2]s}
  ports: [{name: http, port: %[3]d}]
`, ns, name, port, flowMap(svcLabels))
}

// ClientPod returns the manifest of a pod of ClientImage, bound to the
// simulated node: with a data plane it gets a network namespace and a
// resolv.conf, and Exec runs commands in it.
func ClientPod(ns, name string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  nodeName: %[3]s
  containers: [{name: client, image: %[4]s}]
`, ns, name, NodeName, ClientImage)
}

// Namespace returns the manifest of a namespace.
func Namespace(name string) string {
	return fmt.Sprintf("\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", name)
}

// flowMap renders m as a YAML flow mapping with quoted values, keys sorted.
func flowMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %q", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// PeerSet returns, for a cluster with a real node, StatefulSet nginx-set of
// 3 pods behind the headless Service nginx-svc, exported in gateway mode,
// in namespace default: every pod of image (Images.Busybox) serves "hello
// from CLUSTER/default/POD" (as Identity says) over HTTP on port 80 and
// echoes on the plain TCP port 7000.
func PeerSet(cluster, image string) string { return fmt.Sprintf(peerSet, cluster, image) }

const peerSet = `
apiVersion: v1
kind: Service
metadata:
  name: nginx-svc
  namespace: default
  labels: {mirror.linkerd.io/exported: "true"}
spec:
  clusterIP: None
  selector: {app: nginx}
  ports:
  - {name: http, port: 80}
  - {name: echo, port: 7000}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nginx-set, namespace: default}
spec:
  serviceName: nginx-svc
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: server
        image: %[2]s
        imagePullPolicy: Never
        env:
        - {name: CLUSTER, value: %[1]s}
        - name: POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: NS
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        command: [sh, -c, 'mkdir -p /tmp/www && echo "hello from $CLUSTER/$NS/$POD" > /tmp/www/index.html && (nc -ll -p 7000 -e cat &) && exec httpd -f -p 80 -h /tmp/www']
        ports:
        - {name: http, containerPort: 80}
        - {name: echo, containerPort: 7000}
        readinessProbe:
          httpGet: {path: /index.html, port: 80}
          periodSeconds: 1
`

// BusyboxClient returns, for a cluster with a real node, pod default/client
// of image (Images.Busybox), which runs nothing but sleep: commands run in
// it with kubectl exec, and resolve through the cluster DNS as any pod's.
func BusyboxClient(image string) string { return fmt.Sprintf(clientPod, image) }

const clientPod = `
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  terminationGracePeriodSeconds: 0
  # The pod's processes share one PID namespace whose PID 1 is the pause
  # process, which reaps orphans. Without it PID 1 is sleep, which reaps
  # none: every busybox timeout leaves its watchdog as a zombie, and a
  # long loop of commands exhausts the machine's PIDs.
  shareProcessNamespace: true
  containers:
  - name: client
    image: %s
    imagePullPolicy: Never
    command: [sleep, "1000000"]
`

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

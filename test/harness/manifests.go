package harness

import (
	"fmt"
	"slices"
	"strings"
)

// StatefulSet returns a manifest: a headless Service svc with port http 80
// and the given labels (e.g. the export label), and StatefulSet set of
// replicas pods behind it, bound to the simulated node. The namespace must
// exist.
func StatefulSet(ns, svc, set string, replicas int, svcLabels map[string]string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: %[5]s}
spec:
  clusterIP: None
  selector: {app: %[2]s}
  ports: [{name: http, port: 80}]
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
      containers: [{name: nginx, image: nginx, ports: [{name: http, containerPort: 80}]}]
`, ns, svc, set, replicas, flowMap(svcLabels), NodeName)
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

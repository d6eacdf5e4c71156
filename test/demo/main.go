// Command demo brings up local clusters east, west and paris on this
// machine, exports a StatefulSet from west and paris, prints how to reach
// them, and runs until interrupted. `make demo` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
)

// nginx is an exported StatefulSet behind a headless Service.
const nginx = `
apiVersion: v1
kind: Service
metadata:
  name: nginx-svc
  labels: {mirror.linkerd.io/exported: "true"}
spec:
  clusterIP: None
  selector: {app: nginx}
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nginx-set}
spec:
  serviceName: nginx-svc
  replicas: 3
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      nodeName: ` + harness.NodeName + `
      containers: [{name: nginx, image: nginx, ports: [{name: http, containerPort: 80}]}]
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env := harness.New(harness.Options{Clusters: []harness.ClusterOptions{
		{Name: "east", Workloads: true},
		{Name: "west", Workloads: true},
		{Name: "paris", Workloads: true},
	}})
	defer env.Stop()
	start := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := env.Start(startCtx); err != nil {
		return err
	}
	for _, name := range []string{"west", "paris"} {
		if err := env.Cluster(name).Apply(ctx, nginx); err != nil {
			return err
		}
	}

	fmt.Printf("\n%d clusters up in %.1fs. State and logs: %s\n\n", len(env.Clusters()), time.Since(start).Seconds(), env.Dir)
	for _, c := range env.Clusters() {
		fmt.Printf("  %-6s %s  services %s  pods %s\n         KUBECONFIG=%s\n",
			c.Name, c.Server, c.ServiceCIDR, c.PodCIDR, c.Kubeconfig)
	}
	fmt.Printf("\nwest and paris export StatefulSet nginx-set (3 pods) behind headless nginx-svc.\n")
	fmt.Printf("\nPress Ctrl-C to stop everything.\n")
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

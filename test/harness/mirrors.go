package harness

import (
	"context"
	"strings"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// Mirrors returns the mirror Services of namespace ns in c, the ones a
// controller made for other clusters' exports, by name.
func (c *Cluster) Mirrors(ctx context.Context, ns string) (map[string]corev1.Service, error) {
	list, err := c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.MirrorSelector})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Service{}
	for _, s := range list.Items {
		out[s.Name] = s
	}
	return out, nil
}

// EgressPorts returns the egress ports a controller recorded on the
// Services it made in c, as the annotation holds them
// ("80/TCP=30001,..."): those of namespace ns by name, or, when ns is "",
// those of every namespace by namespace/name.
func (c *Cluster) EgressPorts(ctx context.Context, ns string) (map[string]string, error) {
	list, err := c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.ManagedBy + "=" + labels.ManagedByValue})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		if v := s.Annotations[labels.EgressPorts]; v != "" {
			key := s.Name
			if ns == "" {
				key = s.Namespace + "/" + s.Name
			}
			out[key] = v
		}
	}
	return out, nil
}

// AssertEgressPortsUnique fails t for each egress port that two of ports
// (EgressPorts' answer) give.
func AssertEgressPortsUnique(t assert.TestingT, ports map[string]string) {
	seen := map[string]string{}
	for name, v := range ports {
		for _, kv := range strings.Split(v, ",") {
			_, p, _ := strings.Cut(kv, "=")
			if other, dup := seen[p]; dup {
				assert.Fail(t, "egress port given twice", "port %s: %s and %s", p, other, name)
			}
			seen[p] = name
		}
	}
}

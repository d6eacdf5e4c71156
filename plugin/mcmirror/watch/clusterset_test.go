package watch

import (
	"context"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// derivedService is the derived Service of import name, as the controller
// makes it; clusterIP "None" for a Headless import.
func derivedService(name, clusterIP string, managed bool) *corev1.Service {
	l := map[string]string{labels.ServiceImport: name}
	if managed {
		l[labels.ManagedBy] = labels.ManagedByValue
	}
	s := service("derived-"+name, l, clusterIP, corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
	if clusterIP != corev1.ClusterIPNone {
		s.Spec.ClusterIPs = []string{clusterIP}
	}
	return s
}

// The local derived Services are watched, with clusterset only: one the
// controller did not make is ignored; a change, a new one and a deletion
// show in the answers.
func TestClusterSetWatch(t *testing.T) {
	ctx := context.Background()
	west := remotetest.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1"))
	local := remotetest.NewClientset(
		derivedService("api", "10.97.0.1", true),
		derivedService("fake", "10.97.0.2", false), // not the controller's
	)
	m := newStack(t, local, Options{StartupTimeout: eventBound, ClusterSet: true})
	m.link(t, "west", west)
	m.start(t)

	eventually(t, "the ClusterSetIP import", answersA(t, m, "api"+cs, "10.97.0.1"))
	assert.Equal(t, "NXDOMAIN", rcode(askA(t, m, "fake"+cs)), "a Service the controller did not make answers")
	assert.Equal(t, "NXDOMAIN", rcode(askA(t, m, "web"+cs)), "web, exported but not imported")
	eventually(t, "the derived Services counted", func() bool {
		return testutil.ToFloat64(linkObjects.WithLabelValues("east", "derived")) == 1
	})

	// web is imported: Headless, west's pod.
	_, err := local.CoreV1().Services("default").Create(ctx, derivedService("web", corev1.ClusterIPNone, true), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, "the Headless import", answersA(t, m, "web"+cs, "10.1.0.1"))
	eventually(t, "its pod", answersA(t, m, "10-1-0-1.west.web"+cs, "10.1.0.1"))
	assert.True(t, answersA(t, m, "web-west"+z, "10.1.0.1")(), "web-west no longer answered")

	// api's derived Service gets a new ClusterIP, then goes.
	_, err = local.CoreV1().Services("default").Update(ctx, derivedService("api", "10.97.0.3", true), metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, "the new ClusterSetIP", answersA(t, m, "api"+cs, "10.97.0.3"))
	require.NoError(t, local.CoreV1().Services("default").Delete(ctx, "derived-api", metav1.DeleteOptions{}))
	eventually(t, "api gone", func() bool { return rcode(askA(t, m, "api"+cs)) == "NXDOMAIN" })
}

// Without clusterset, no derived Service is watched.
func TestClusterSetNoWatch(t *testing.T) {
	local := remotetest.NewClientset(derivedService("api", "10.97.0.1", true))
	m := startWith(t, local, time.Second, 0)
	assert.Nil(t, m.watch.cluster("east").derived, "derived Services watched without clusterset")
	assert.Nil(t, m.watch.Derived("default", "api"), "Derived(api) without clusterset")
}

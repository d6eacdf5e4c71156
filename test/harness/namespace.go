package harness

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreateNamespace creates namespace ns in clusters, in every cluster of the
// environment when none is given. A namespace of that name that an earlier
// run (-count) deleted and that is still terminating is waited for first:
// nothing can be created in it.
func (e *Env) CreateNamespace(t testing.TB, ns string, clusters ...*Cluster) {
	t.Helper()
	if len(clusters) == 0 {
		clusters = e.clusters
	}
	ctx := context.Background()
	for _, c := range clusters {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			got, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			require.NoError(ct, err)
			assert.Nil(ct, got.DeletionTimestamp, "namespace %s/%s still terminating", c.Name, ns)
		}, 60*time.Second, 100*time.Millisecond)
		require.NoError(t, c.Apply(ctx, Namespace(ns)), "%s: namespace %s", c.Name, ns)
	}
}

// TempNamespace is CreateNamespace, and deletes ns again when t ends from
// the clusters that run kube-controller-manager: a cluster without one has
// no namespace controller to finish a deletion, so its namespaces stay.
func (e *Env) TempNamespace(t testing.TB, ns string, clusters ...*Cluster) {
	t.Helper()
	if len(clusters) == 0 {
		clusters = e.clusters
	}
	e.CreateNamespace(t, ns, clusters...)
	for _, c := range clusters {
		if c.Workloads {
			t.Cleanup(func() {
				_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
			})
		}
	}
}

var nameSeq atomic.Int32

// UniqueName returns base, a dash and a number no other call of this run
// gives: a test may run more than once (-count), and what it made before
// may still be there.
func UniqueName(base string) string { return fmt.Sprintf("%s-%d", base, nameSeq.Add(1)) }

// UniqueNamespace creates, as CreateNamespace does, a namespace named
// UniqueName(base), and returns its name.
func (e *Env) UniqueNamespace(t testing.TB, base string, clusters ...*Cluster) string {
	t.Helper()
	ns := UniqueName(base)
	e.CreateNamespace(t, ns, clusters...)
	return ns
}

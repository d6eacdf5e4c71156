package remote

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestFieldSelector(t *testing.T) {
	for _, tc := range []struct {
		ns   link.Namespaces
		want string
	}{
		{link.Namespaces{}, ""},
		{link.Namespaces{Deny: []string{"a", "b"}}, "metadata.namespace!=a,metadata.namespace!=b"},
		{link.Namespaces{Allow: []string{"a"}}, "metadata.namespace=a"},
		{link.Namespaces{Allow: []string{"a"}, Deny: []string{"b"}}, "metadata.namespace=a"},
		{link.Namespaces{Allow: []string{"a", "b"}}, ""},
	} {
		assert.Equal(t, tc.want, fieldSelector(tc.ns), "%+v", tc.ns)
	}
}

func svc(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// A link narrowed to some namespaces lists and watches only what they
// hold: the API server is asked to leave the others out where a field
// selector says it, and what comes anyway (several allowed namespaces, or
// a server that ignores the selector, as the fake does) is left out
// before anything above sees it: lists, and watch events.
func TestRequestsNarrowed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ns     link.Namespaces
		fields string
		want   []string
	}{
		{"all", link.Namespaces{}, "", []string{"shop/a", "tenant-b/b", "billing/c"}},
		{"deny", link.Namespaces{Deny: []string{"tenant-b"}}, "metadata.namespace!=tenant-b", []string{"shop/a", "billing/c"}},
		{"allow one", link.Namespaces{Allow: []string{"shop"}}, "metadata.namespace=shop", []string{"shop/a"}},
		{"allow several", link.Namespaces{Allow: []string{"billing", "shop"}}, "", []string{"shop/a", "billing/c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(svc("shop", "a"), svc("tenant-b", "b"), svc("billing", "c"))
			h := NewHealth("west", []string{"Services"}, Hooks{})
			defer h.Stop()
			lw := Requests(client, Services, "", tc.ns, h, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			l, err := lw.ListWithContextFunc(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			var got []string
			for _, s := range l.(*corev1.ServiceList).Items {
				got = append(got, s.Namespace+"/"+s.Name)
			}
			assert.ElementsMatch(t, tc.want, got, "listed")

			wi, err := lw.WatchFuncWithContext(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			defer wi.Stop()
			for _, s := range []*corev1.Service{svc("tenant-b", "d"), svc("billing", "e"), svc("shop", "f")} {
				_, err := client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			// The last one created is in every allowed set: once it
			// comes, whatever was to come has.
			got = nil
			for !slices.Contains(got, "shop/f") {
				select {
				case e := <-wi.ResultChan():
					require.Equal(t, watch.Added, e.Type)
					s := e.Object.(*corev1.Service)
					got = append(got, s.Namespace+"/"+s.Name)
				case <-ctx.Done():
					t.Fatalf("watched %v, never shop/f", got)
				}
			}
			// A fake's watch may send what exists too: every event is
			// of an allowed namespace, and every allowed one created came.
			for _, k := range got {
				ns, _, _ := strings.Cut(k, "/")
				assert.True(t, tc.ns.Allows(ns), "watched %s", k)
			}
			for _, k := range []string{"tenant-b/d", "billing/e", "shop/f"} {
				if ns, _, _ := strings.Cut(k, "/"); tc.ns.Allows(ns) {
					assert.Contains(t, got, k, "watched")
				}
			}

			for _, a := range client.Actions() {
				if r, ok := a.(interface {
					GetListRestrictions() k8stesting.ListRestrictions
				}); ok {
					assert.Equal(t, tc.fields, r.GetListRestrictions().Fields.String(), "the field selector of a %s", a.GetVerb())
				}
			}
		})
	}
}

package index

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every pod is found by its name, whatever the number of pods (the search
// starts where the host's hash would be and walks from there), and a name
// that is no pod's is not.
func TestFindPod(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 100, 1500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := testIndex(indextest.Pods(n))
			for _, c := range []string{"west", "paris"} {
				for i := range n {
					name := fmt.Sprintf("big-%d.big-%s%s", i, c, z)
					h, ok := x.Find(name)
					require.False(t, !ok || h.r.kind != KindPod, "%s: not found as a pod", name)
					require.Equal(t, name, h.g.members[h.r.m].podName(int(h.r.p), int(h.r.zi)), "the pod found for %s", name)
				}
				for _, host := range []string{fmt.Sprintf("big-%d", n), "big-", "big", "big-0x", "x"} {
					assert.Nil(t, x.Lookup(host+".big-"+c+z), "%s: found, but no pod has that name", host+".big-"+c+z)
				}
			}
		})
	}
}

// Pods whose hosts share a hash are told apart by their names.
func TestFindPodSameHash(t *testing.T) {
	m := &member{names: []string{"svc-west" + z}, pods: make([]pod, 3)}
	for _, h := range []string{"a", "b", "c"} {
		m.podNames = append(m.podNames, h+"."+m.names[0])
	}
	// Pretend a and b collide: both under a's hash.
	ha := hostHash("a")
	m.byHash = []uint64{ha | 0, ha | 1, hostHash("c") | 2}
	slices.Sort(m.byHash)
	for name, want := range map[string]int{"a.svc-west" + z: 0, "b.svc-west" + z: 1, "d.svc-west" + z: -1} {
		assert.Equal(t, want, m.findPod("a", name, 0), "findPod(a, %s)", name)
	}
	assert.EqualValues(t, 2, m.findPod("c", "c.svc-west"+z, 0), "findPod(c)")
}

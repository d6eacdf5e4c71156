package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// An import waits only for the links that have not synced and that it
// names, and a cluster no link names while the link Secrets are being
// read; each until the end of its wait.
func TestHeldClusters(t *testing.T) {
	c := &Controller{opts: Options{Cluster: "east"}}
	t0 := time.Unix(1_000_000, 0)
	ls := linkState{waiting: map[string]time.Time{"tokyo": t0.Add(30 * time.Second), "osaka": t0.Add(40 * time.Second)},
		linked: map[string]bool{"west": true, "tokyo": true, "osaka": true}}

	held, until := c.heldClusters(ls, []string{"east", "west"})
	assert.Empty(t, held, "the local cluster and synced links: nothing to wait for")
	assert.True(t, until.IsZero())
	held, until = c.heldClusters(ls, []string{"west", "tokyo", "paris"})
	assert.Equal(t, []string{"tokyo"}, held, "paris, no link, is gone: not waited for")
	assert.Equal(t, t0.Add(30*time.Second), until)
	held, until = c.heldClusters(ls, []string{"osaka", "tokyo", "tokyo"})
	assert.Equal(t, []string{"osaka", "tokyo"}, held)
	assert.Equal(t, t0.Add(40*time.Second), until, "the last wait")

	ls.sourcesUntil = t0.Add(10 * time.Second)
	held, until = c.heldClusters(ls, []string{"paris", "east"})
	assert.Equal(t, []string{"paris"}, held, "a link Secret not read yet may link paris")
	assert.Equal(t, t0.Add(10*time.Second), until)
}

// existingClusters reads an import's status and its slices' labels.
func TestExistingClusters(t *testing.T) {
	si := &mcsv1beta1.ServiceImport{Status: mcsv1beta1.ServiceImportStatus{Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "tokyo"}}}}
	existing := map[string]*discoveryv1.EndpointSlice{
		"a": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "tokyo"}}},
		"b": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "osaka"}}},
	}
	assert.Equal(t, []string{"west", "tokyo", "osaka"}, existingClusters(si, existing))
	assert.Equal(t, []string{"osaka"}, existingClusters(nil, map[string]*discoveryv1.EndpointSlice{"b": existing["b"]}))
}

// After the wait, an import goes on with its synced sources and keeps
// the held cluster's slices as they are (owned by the derived Service as
// it is now) and the cluster in its status.
func TestPlanImportKept(t *testing.T) {
	base := DerivedName("shop", "web")
	old := importSlice(importInput{ns: "shop", name: "web", derived: liveDerived(false)}, "tokyo", base+"-tokyo",
		discoveryv1.AddressTypeIPv4, sourceSlice(discoveryv1.AddressTypeIPv4, 80, "10.7.0.1").Endpoints,
		sourceSlice(discoveryv1.AddressTypeIPv4, 80).Ports)
	west := importSource{cluster: "west", service: testExportService(nil),
		slices: []*discoveryv1.EndpointSlice{sourceSlice(discoveryv1.AddressTypeIPv4, 80, "10.1.0.1")}}
	replaced := liveDerived(false)
	replaced.UID = "new-uid"
	existing := map[string]*discoveryv1.EndpointSlice{old.Name: old}
	p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{west}, derived: replaced,
		kept: keptSlices([]string{"tokyo"}, existing)})
	assert.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "tokyo"}}, p.clusters)
	k := p.slices[base+"-tokyo"]
	require.NotNil(t, k)
	assert.Equal(t, old.Endpoints, k.Endpoints, "as it last was")
	assert.Equal(t, old.Ports, k.Ports)
	assert.Equal(t, types.UID("new-uid"), k.OwnerReferences[0].UID)
	assert.Contains(t, p.slices, base+"-west")

	// A held cluster without slices stays in the status.
	p = planImport(importInput{ns: "shop", name: "web", sources: []importSource{west}, derived: replaced,
		kept: keptSlices([]string{"osaka"}, existing)})
	assert.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "osaka"}}, p.clusters)
	assert.NotContains(t, p.slices, base+"-tokyo", "only the held clusters' slices are kept")
}

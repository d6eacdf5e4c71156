package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
)

// mcsFixture is a fixture whose controller acts on the MCS API of a fake
// clientset. Syncs of the MCS side are run by hand, one key at a time.
type mcsFixture struct {
	*fixture
	mcs *mcsfake.Clientset
}

func newMCSFixture(t *testing.T, local, mcsObjs []runtime.Object, remotes map[string][]runtime.Object) *mcsFixture {
	t.Helper()
	// The informers of the mcs-api module do not tell the reflector that
	// their fake clientset cannot stream a watch-list (as client-go's own
	// do): they would never sync.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	m := mcsfake.NewSimpleClientset(mcsObjs...)
	return &mcsFixture{fixture: newFixture(t, fixtureOptions{local: local, mcs: m}, remotes), mcs: m}
}

// syncMCS runs one sync of the MCS side for key (namespace/name), as
// processNextMCS does, and returns its writes, local and to the MCS API
// ("verb resource[/subresource] name"); then it waits until the
// informers have seen them.
func (f *mcsFixture) syncMCS(key string) []string {
	f.t.Helper()
	f.local.ClearActions()
	f.mcs.ClearActions()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	require.NoError(f.t, err)
	sources, links := f.c.importSources(ns, name)
	require.NoError(f.t, errors.Join(f.c.syncExport(f.ctx, key, sources), f.c.syncImport(f.ctx, key, sources, links)))
	writes := writesOf(append(f.local.Actions(), f.mcs.Actions()...))
	f.waitCaches()
	f.waitMCS()
	return writes
}

// convergeMCS syncs key until a sync writes nothing, and returns every
// write.
func (f *mcsFixture) convergeMCS(key string) []string {
	f.t.Helper()
	return convergeBy(f.t, key, f.syncMCS)
}

// waitMCS waits until the MCS informers hold what the fake MCS API holds.
func (f *mcsFixture) waitMCS() {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		imports, err := f.mcs.MulticlusterV1beta1().ServiceImports("").List(f.ctx, metav1.ListOptions{})
		if err != nil || !holds(f.c.mcs.imports.GetStore(), imports.Items, func(got, want *mcsv1beta1.ServiceImport) bool {
			return semEqual(got.Spec, want.Spec) && semEqual(got.Status, want.Status) && semEqual(got.Annotations, want.Annotations)
		}) {
			return false
		}
		exports, err := f.mcs.MulticlusterV1beta1().ServiceExports("").List(f.ctx, metav1.ListOptions{})
		return err == nil && holds(f.c.mcs.exports.GetStore(), exports.Items, func(got, want *mcsv1beta1.ServiceExport) bool {
			return semEqual(got.Status, want.Status)
		})
	}, 10*time.Second, time.Millisecond)
}

// eventsWith returns the events recorded so far that contain reason.
func (f *mcsFixture) eventsWith(reason string) []string {
	return slices.DeleteFunc(f.drainEvents(), func(e string) bool { return !strings.Contains(e, " "+reason+" ") })
}

func mcsRefused(reason string) float64 {
	return testutil.ToFloat64(mcsRefusedTotal.WithLabelValues(reason))
}

// localService is a Service of this cluster, with a ClusterIP.
func localService(ns, name string, l, a map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, Annotations: a, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.9.9", ClusterIPs: []string{"10.96.9.9"},
			Ports: []corev1.ServicePort{tcp("http", 80)}},
	}
}

// A Service owner who writes the stamp by hand, without a ServiceExport,
// exports nothing: the controller removes the stamp (label and time, the
// owner's other labels kept), does not import the Service, and says so
// with an Event on the Service and mcs_refused_total. Removed, it writes
// nothing more.
func TestStampWithoutServiceExportRemoved(t *testing.T) {
	svc := localService("default", "web",
		map[string]string{labels.ServiceExportMode: labels.ModeGateway, "team": "a"},
		map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z", "note": "kept"})
	f := newMCSFixture(t, []runtime.Object{svc}, nil, nil)
	before := mcsRefused(ReasonStampRefused)

	assert.Equal(t, []string{"patch services web"}, f.syncMCS("default/web"), "the stamp removed, nothing imported")
	got := f.service("default", "web")
	require.NotNil(t, got)
	assert.Equal(t, map[string]string{"team": "a"}, got.Labels)
	assert.Equal(t, map[string]string{"note": "kept"}, got.Annotations)
	assert.Len(t, f.eventsWith(ReasonStampRefused), 1)
	assert.Equal(t, before+1, mcsRefused(ReasonStampRefused))
	assert.Empty(t, f.syncMCS("default/web"), "second sync of unchanged state")
	_, err := f.mcs.MulticlusterV1beta1().ServiceImports("default").Get(f.ctx, "web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no ServiceImport: %v", err)
}

// A ServiceExport of a derived Service (what the controller made for a
// ServiceImport) is not valid, as one of a mirror is not: no stamp, so no
// other cluster imports it again; an Event on the ServiceExport and
// mcs_refused_total say why, once.
func TestServiceExportOfDerivedServiceInvalid(t *testing.T) {
	name := DerivedName("default", "web")
	derived, _ := derivedOf(name, "web", "")
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Generation: 1}}
	f := newMCSFixture(t, []runtime.Object{derived}, []runtime.Object{se}, nil)
	before := mcsRefused(reasonDerivedService)

	assert.Equal(t, []string{"update serviceexports/status " + name}, f.syncMCS("default/"+name))
	got, err := f.mcs.MulticlusterV1beta1().ServiceExports("default").Get(f.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	valid := meta.FindStatusCondition(got.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
	require.NotNil(t, valid)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Equal(t, reasonDerivedService, valid.Reason)
	assert.Contains(t, valid.Message, "ServiceImport web")
	assert.NotContains(t, f.service("default", name).Labels, labels.ServiceExportMode, "not stamped")
	ev := f.eventsWith(ReasonServiceExportInvalid)
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], reasonDerivedService)
	assert.Equal(t, before+1, mcsRefused(reasonDerivedService))

	assert.Empty(t, f.syncMCS("default/"+name), "second sync of unchanged state")
	assert.Empty(t, f.eventsWith(ReasonServiceExportInvalid), "said once")
	assert.Equal(t, before+1, mcsRefused(reasonDerivedService))
}

// Two imports of one namespace whose derived names collided in 40 bits
// (derived-<10 hex digits>, found by search) get a derived Service each:
// their own ClusterSetIP, labels and EndpointSlices.
func TestDerivedNamesOfCollidingImports(t *testing.T) {
	const a, b = "svc-206765", "svc-2176644" // sha256("shop/"+name) share their first 40 bits
	require.Equal(t, legacyDerivedName("shop", a), legacyDerivedName("shop", b), "the names collided before")
	f := newMCSFixture(t, []runtime.Object{namespace("shop")}, nil, west(
		exported("shop", a, labels.ExportGateway, false, tcp("http", 80)), endpoints("shop", a, ""),
		exported("shop", b, labels.ExportGateway, false, tcp("grpc", 9090)), endpoints("shop", b, ""),
	))
	for _, n := range []string{a, b} {
		f.converge("west/shop/" + n)
		f.convergeMCS("shop/" + n)
	}
	// a once more: a derived Service it shares with b would be b's now.
	f.convergeMCS("shop/" + a)
	ips := map[string]bool{}
	for _, n := range []string{a, b} {
		d := f.service("shop", DerivedName("shop", n))
		require.NotNil(t, d, n)
		assert.Equal(t, n, d.Labels[labels.ServiceImport], "%s's derived Service is its own", n)
		si, err := f.mcs.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, n, metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, si.Spec.IPs, 1)
		ips[si.Spec.IPs[0]] = true
		assert.Equal(t, d.Spec.ClusterIPs, si.Spec.IPs)
		es := f.slice("shop", d.Name+"-west")
		require.NotNil(t, es, n)
		assert.Equal(t, n, es.Labels[mcsv1beta1.LabelServiceName])
	}
	assert.Len(t, ips, 2, "a ClusterSetIP each")
}

// A derived Service that belongs to another import (its
// mcmirror.dev/service-import says so) is never overwritten, nor its
// EndpointSlices: the import is refused with an Event on that Service and
// mcs_refused_total.
func TestDerivedServiceOfAnotherImportLeftAlone(t *testing.T) {
	name := DerivedName("default", "web")
	held, heldSlice := derivedOf(name, "api", "10.1.2.3")
	held.Spec.Ports = []corev1.ServicePort{tcp("grpc", 9090)}
	f := newMCSFixture(t, []runtime.Object{held, heldSlice}, nil, west(
		exported("default", "web", labels.ExportGateway, false, tcp("http", 80)), endpoints("default", "web", ""),
	))
	f.converge("west/default/web")
	f.drainEvents()
	before := mcsRefused(ReasonDerivedServiceTaken)

	assert.Empty(t, f.syncMCS("default/web"), "nothing written")
	assert.Equal(t, held.Labels, f.service("default", name).Labels)
	assert.Equal(t, held.Spec.Ports, f.service("default", name).Spec.Ports)
	assert.Equal(t, heldSlice.Endpoints, f.slice("default", name+"-west").Endpoints)
	ev := f.eventsWith(ReasonDerivedServiceTaken)
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "ServiceImport api")
	assert.Equal(t, before+1, mcsRefused(ReasonDerivedServiceTaken))
}

// derivedOf is a derived Service default/name of ServiceImport si, and
// its slice of west with one endpoint at addr.
func derivedOf(name, si, addr string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := localService("default", name,
		map[string]string{labels.ManagedBy: labels.ManagedByValue, labels.ServiceImport: si, mcsv1beta1.LabelServiceName: si}, nil)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-west", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy, labels.ManagedBy: labels.ManagedByValue,
			mcsv1beta1.LabelServiceName: si, mcsv1beta1.LabelSourceCluster: "west"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
	return svc, es
}

// On upgrade, the derived Service under its former name is renamed: its
// slices and it are deleted, the new one keeps its ClusterIP (the
// ClusterSetIP stays), or, when that address is taken meanwhile, gets
// another, which the ServiceImport then says; an import no longer wanted
// leaves nothing behind.
func TestDerivedServiceRenamedOnUpgrade(t *testing.T) {
	// As an earlier release made them.
	oldSvc, oldSlice := derivedOf(legacyDerivedName("default", "web"), "web", egressIP.String())
	oldSvc.Spec.ClusterIP, oldSvc.Spec.ClusterIPs = "10.96.200.7", []string{"10.96.200.7"}
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{labels.ManagedBy: labels.ManagedByValue}},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"10.96.200.7"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	newName := DerivedName("default", "web")
	web := []runtime.Object{exported("default", "web", labels.ExportGateway, false, tcp("http", 80)), endpoints("default", "web", "")}
	for _, tc := range []struct {
		name string
		// taken refuses a create at the former address, as the API server
		// does when another Service took it.
		taken    bool
		unexport bool
		wantIP   string
	}{
		{name: "the ClusterSetIP kept", wantIP: "10.96.200.7"},
		{name: "the address taken meanwhile: a new one", taken: true},
		{name: "no longer exported: all gone", unexport: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := web
			if tc.unexport {
				remote = nil
			}
			f := newMCSFixture(t, []runtime.Object{oldSvc.DeepCopy(), oldSlice.DeepCopy()}, []runtime.Object{si.DeepCopy()},
				west(remote...))
			if tc.taken {
				f.local.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if a.(k8stesting.CreateAction).GetObject().(*corev1.Service).Spec.ClusterIP == "10.96.200.7" {
						return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, newName,
							field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), []string{"10.96.200.7"}, "provided IP is already allocated")})
					}
					return false, nil, nil
				})
			}
			f.converge("west/default/web")
			f.convergeMCS("default/web")
			assert.Nil(t, f.service("default", oldSvc.Name), "the former derived Service is gone")
			assert.Nil(t, f.slice("default", oldSlice.Name), "and its slice")
			if tc.unexport {
				assert.Nil(t, f.service("default", newName))
				_, err := f.mcs.MulticlusterV1beta1().ServiceImports("default").Get(f.ctx, "web", metav1.GetOptions{})
				assert.True(t, apierrors.IsNotFound(err), "the ServiceImport is deleted: %v", err)
				return
			}
			d := f.service("default", newName)
			require.NotNil(t, d)
			assert.Equal(t, "web", d.Labels[labels.ServiceImport])
			if tc.wantIP != "" {
				assert.Equal(t, []string{tc.wantIP}, d.Spec.ClusterIPs, "the ClusterSetIP stays")
			} else {
				assert.NotEqual(t, []string{"10.96.200.7"}, d.Spec.ClusterIPs)
			}
			got, err := f.mcs.MulticlusterV1beta1().ServiceImports("default").Get(f.ctx, "web", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, d.Spec.ClusterIPs, got.Spec.IPs)
			es := f.slice("default", newName+"-west")
			require.NotNil(t, es, "the import's slice under the new name")
			assert.Equal(t, "web", es.Labels[mcsv1beta1.LabelServiceName])
		})
	}
}

package controller

import (
	"errors"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// An error is retried with backoff maxRetries times, then dropped; success
// forgets the key's failures.
func TestHandleErr(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, nil)
	c := f.c
	const key = "west/default/web"
	errs := testutil.ToFloat64(syncsTotal.WithLabelValues("error"))
	dropped := testutil.ToFloat64(syncsTotal.WithLabelValues("dropped"))
	for i := range maxRetries {
		c.handleErr(f.ctx, errors.New("boom"), key)
		assert.Equal(t, i+1, c.queue.NumRequeues(key))
	}
	c.handleErr(f.ctx, errors.New("boom"), key)
	assert.Equal(t, 0, c.queue.NumRequeues(key), "dropped")
	assert.Equal(t, float64(maxRetries), testutil.ToFloat64(syncsTotal.WithLabelValues("error"))-errs)
	assert.Equal(t, float64(1), testutil.ToFloat64(syncsTotal.WithLabelValues("dropped"))-dropped)
	ev := f.drainEvents()
	require.Len(t, ev, 1, "one Event when the key is dropped")
	assert.Contains(t, ev[0], ReasonWriteFailed)
	assert.Contains(t, ev[0], "west/default/web")

	c.handleErr(f.ctx, errors.New("boom"), key)
	c.handleErr(f.ctx, nil, key)
	assert.Equal(t, 0, c.queue.NumRequeues(key), "success forgets")
}

// A failed write makes the sync fail (so it is retried); the next sync
// completes the work.
func TestSyncRetriesFailedWrites(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	fail := f.failing("create", "endpointslices")
	require.Error(t, f.c.sync(f.ctx, "west/default/web"))
	f.waitCaches()
	assert.NotNil(t, f.service("default", "web-west"))
	assert.Nil(t, f.slice("default", "web-west"))
	*fail = false
	assert.Equal(t, []string{"create endpointslices web-west"}, f.sync("west/default/web"))
	assert.Empty(t, f.sync("west/default/web"))
}

// A port is released only once no Service records it: when the write that
// would delete a mirror or rewrite its EgressPorts annotation fails, the
// port stays allocated, and a mirror synced meanwhile does not get it.
func TestFailedWriteKeepsEgressPorts(t *testing.T) {
	web := exported("default", "web", "true", false, tcp("http", 80))
	testFailedWrite(t, fixtureOptions{}, "services", []failedWrite{{
		name: "unexported, delete fails", ports: PortRange{First: 40000, Last: 40000},
		remote: []runtime.Object{web}, key: "west/default/web",
		change: []runtime.Object{unlabelled(web)}, verb: "delete", obj: "web-west",
	}, {
		name: "port changed, update fails", ports: PortRange{First: 40000, Last: 40001},
		remote: []runtime.Object{web}, key: "west/default/web",
		change: []runtime.Object{exported("default", "web", "true", false, tcp("http", 8080))}, verb: "update", obj: "web-west",
	}, {
		name: "pod gone, delete fails", ports: PortRange{First: 40000, Last: 40001},
		remote: []runtime.Object{exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1")},
		key:    "west/default/db", change: []runtime.Object{endpoints("default", "db", "db-0")}, verb: "delete", obj: "db-1-west",
	}, {
		name: "became headless, delete before recreate fails", ports: PortRange{First: 40000, Last: 40001},
		remote: []runtime.Object{exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "")},
		key:    "west/default/db", change: []runtime.Object{endpoints("default", "db", "db-0")}, verb: "delete", obj: "db-west",
	}}, func(f *fixture, svc string) int32 {
		return labels.ParseEgressPorts(f.service("default", svc).Annotations[labels.EgressPorts])["80/TCP"]
	})
}

// failedWrite is a write that fails while the remote objects of key change
// to change.
type failedWrite struct {
	name string
	// ports is just big enough for key's mirrors before and after the
	// change: a released port is the only free one.
	ports  PortRange
	remote []runtime.Object
	key    string
	change []runtime.Object
	// verb is the write that fails; obj records the port.
	verb, obj string
}

// testFailedWrite runs each case with the writes verb of resource failing:
// the port that obj records (recordedOf) stays allocated to obj, so that
// api, synced meanwhile, gets none, until the write succeeds: then the port
// is released and api gets it.
func testFailedWrite(t *testing.T, o fixtureOptions, resource string, cases []failedWrite, recordedOf func(f *fixture, obj string) int32) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o.ports = tc.ports
			f := newFixture(t, o, west(append([]runtime.Object{exported("default", "api", "true", false, tcp("http", 80))}, tc.remote...)...))
			f.converge(tc.key)
			recorded := recordedOf(f, tc.obj)
			require.NotZero(t, recorded)
			owner := portOwner("default", tc.obj, "80/TCP")
			p, ok := f.c.ports.Port(owner)
			require.True(t, ok && p == recorded, "%s has %d (has %d, %v)", owner, recorded, p, ok)

			fail := f.failing(tc.verb, resource)
			f.remote("west", tc.change...)
			require.Error(t, f.c.sync(f.ctx, tc.key))
			f.waitCaches()
			assert.Equal(t, recorded, recordedOf(f, tc.obj), "still recorded")
			got, ok := f.c.ports.Owner(recorded)
			assert.True(t, ok && got == owner, "port %d stays %s's while it is recorded (owner now %q)", recorded, owner, got)

			f.sync("west/default/api")
			f.assertEgressPortsUnique()
			assert.Empty(t, f.service("default", "api-west").Annotations[labels.EgressPorts], "no port free for api")

			// The write succeeds: the port is released and api gets it.
			*fail = false
			f.converge(tc.key)
			_, ok = f.c.ports.Port(owner)
			assert.False(t, ok, "released")
			f.converge("west/default/api")
			f.assertEgressPortsUnique()
			assert.Equal(t, labels.FormatEgressPorts(map[string]int32{"80/TCP": recorded}), f.service("default", "api-west").Annotations[labels.EgressPorts])
		})
	}
}

// assertEgressPortsUnique checks that no egress port is recorded on two
// Services.
func (f *fixture) assertEgressPortsUnique() {
	f.t.Helper()
	list, err := f.local.CoreV1().Services("").List(f.ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	by := map[int32]string{}
	for _, s := range list.Items {
		for pk, p := range labels.ParseEgressPorts(s.Annotations[labels.EgressPorts]) {
			if prev, dup := by[p]; dup {
				f.t.Errorf("egress port %d recorded twice: %s and %s/%s", p, prev, s.Name, pk)
			}
			by[p] = s.Name + "/" + pk
		}
	}
}

// The gauges say how many mirrors each cluster has.
func TestMirrorsGauge(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, map[string][]runtime.Object{
		"gauge": {
			exported("default", "web", "true", false, tcp("http", 80)),
			exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1"),
			exported("default", "portless", "true", true),
		},
	})
	f.convergeAll("gauge/default/web", "gauge/default/db", "gauge/default/portless")
	assert.Equal(t, float64(2), testutil.ToFloat64(mirrorsGauge.WithLabelValues("gauge", "service")))
	assert.Equal(t, float64(2), testutil.ToFloat64(mirrorsGauge.WithLabelValues("gauge", "pod")))
	assert.Equal(t, float64(1), testutil.ToFloat64(notMirroredGauge.WithLabelValues("gauge", ReasonHeadlessWithoutPorts)))
}

// A linked cluster that cannot be listed keeps its mirrors (the last known
// state is served); an unknown cluster is not swept before the link
// sources have been read.
func TestUnsyncedLinkKeepsMirrors(t *testing.T) {
	mirror := func(cluster string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + cluster, Labels: mirrorLabels(cluster, "web")}}
	}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{mirror("dead"), mirror("later")}}, nil)
	dead := fake.NewClientset()
	dead.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	f.c.links.AddClient("dead", dead)
	assert.Empty(t, f.sync("dead/default/web"))
	assert.NotNil(t, f.service("default", "web-dead"))

	sourcesSynced := false
	f.c.opts.LinksSynced = func() bool { return sourcesSynced }
	assert.Empty(t, f.sync("later/default/web"), "maybe a link Secret not read yet")
	sourcesSynced = true
	assert.Equal(t, []string{"delete services web-later"}, f.sync("later/default/web"))
}

// The same holds for an egress EndpointSlice: while the write that would
// delete it or point it at a new port fails, kube-proxy still sends the
// mirror's traffic to the old port, so it stays allocated. Egress slices
// are told by their shape: with a fixed address, with the addresses of the
// egress Service, and without endpoints (no address known yet).
func TestFailedSliceWriteKeepsEgressPorts(t *testing.T) {
	for _, egress := range []struct {
		name  string
		opts  fixtureOptions
		addrs int
	}{
		{"fixed address", fixtureOptions{}, 1},
		{"egress Service", fixtureOptions{egressService: gatewayEgress, local: []runtime.Object{
			gatewaySlice("gw", discoveryv1.AddressTypeIPv4, "10.244.0.1", "10.244.0.2")}}, 2},
		{"no address yet", fixtureOptions{egressService: gatewayEgress}, 0},
	} {
		t.Run(egress.name, func(t *testing.T) { testFailedSliceWriteKeepsEgressPorts(t, egress.opts, egress.addrs) })
	}
}

func testFailedSliceWriteKeepsEgressPorts(t *testing.T, o fixtureOptions, addrs int) {
	ports := PortRange{First: 40000, Last: 40001}
	testFailedWrite(t, o, "endpointslices", []failedWrite{{
		name: "port changed, slice update fails", ports: ports,
		remote: []runtime.Object{exported("default", "web", "true", false, tcp("http", 80))}, key: "west/default/web",
		change: []runtime.Object{exported("default", "web", "true", false, tcp("http", 8080))}, verb: "update", obj: "web-west",
	}, {
		name: "pod gone, slice delete fails", ports: ports,
		remote: []runtime.Object{exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1")},
		key:    "west/default/db", change: []runtime.Object{endpoints("default", "db", "db-0")}, verb: "delete", obj: "db-1-west",
	}}, func(f *fixture, slice string) int32 {
		es := f.slice("default", slice)
		require.Len(f.t, es.Endpoints, addrs)
		return *es.Ports[0].Port
	})
}

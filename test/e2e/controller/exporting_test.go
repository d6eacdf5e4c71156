package controller_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// startExporter starts `coredns-mc controller` in cluster name (west or
// paris), linked to the other of the two, serving metrics at the returned
// address.
func startExporter(t *testing.T, name, other string, extra ...string) (*harness.Process, string) {
	t.Helper()
	ctl := env.StartFleet(t, harness.FleetOptions{Local: name, Remotes: []string{other}, Parts: harness.FleetController, EgressPorts: "31000-31999",
		Controller: harness.ControllerOptions{EgressAddress: map[string]string{"west": "192.0.2.20", "paris": "192.0.2.30"}[name], Metrics: true, Args: extra}}).Controller
	return ctl.Process, ctl.MetricsAddr
}

func mcsClient(t require.TestingT, cluster string) mcsclient.Interface {
	c, err := mcsclient.NewForConfig(env.Cluster(cluster).Config)
	require.NoError(t, err)
	return c
}

func createServiceExport(t *testing.T, cluster, ns, name string) *mcsv1beta1.ServiceExport {
	t.Helper()
	return createExportedMeta(t, cluster, ns, name, nil, nil)
}

// requireConditions waits until the ServiceExport's conditions have the
// given status and reason, by type ("Conflict": "True/PortConflict"), each
// observed at its current generation.
func requireConditions(t *testing.T, cluster, ns, name string, want map[string]string) {
	t.Helper()
	client := mcsClient(t, cluster)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		se, err := client.MulticlusterV1beta1().ServiceExports(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(c, err)
		for typ, w := range want {
			cond := meta.FindStatusCondition(se.Status.Conditions, typ)
			if !assert.NotNil(c, cond, "%s/%s in %s has no %s condition", ns, name, cluster, typ) {
				continue
			}
			assert.Equal(c, w, string(cond.Status)+"/"+cond.Reason, "%s in %s: %s: %s", name, cluster, typ, cond.Message)
			assert.Equal(c, se.Generation, cond.ObservedGeneration)
		}
	}, wait, tick)
}

// requireStamp waits until the Service carries the stamp of mode (none
// when mode is "") and still carries its owner's team label.
func requireStamp(t *testing.T, cluster, ns, name, mode string, created time.Time) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc := service(c, env.Cluster(cluster), ns, name)
		assert.Equal(c, mode, svc.Labels[labels.ServiceExportMode], "stamp of %s/%s in %s", ns, name, cluster)
		if mode == "" {
			assert.NotContains(c, svc.Annotations, labels.ServiceExportCreated)
		} else {
			assert.Equal(c, created.UTC().Format(time.RFC3339), svc.Annotations[labels.ServiceExportCreated])
		}
		assert.Equal(c, "a", svc.Labels["team"], "the owner's labels are kept")
	}, wait, tick)
}

// requireMirror waits until east has the mirror, or has it no more.
func requireMirror(t *testing.T, ns, name string, present bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		_, ok := m[name]
		assert.Equal(c, present, ok, "mirror %s/%s in east: %v", ns, name, names(m))
	}, wait, tick)
}

// metric reads a series that must exist.
func metric(t require.TestingT, addr, name string, lbl map[string]string) float64 {
	return harness.RequireMetric(t, "http://"+addr+"/metrics", name, lbl)
}

func annotateExport(t *testing.T, cluster, ns, name, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, labels.ModeLabel, value)
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, labels.ModeLabel)
	}
	_, err := mcsClient(t, cluster).MulticlusterV1beta1().ServiceExports(ns).Patch(context.Background(), name,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// A ServiceExport in west exports its Service: west's controller stamps
// the Service and sets the conditions, and east's controller mirrors it.
// A mode annotation picks the mode; a bad one, or deleting the
// ServiceExport, takes the stamp away, and the mirror goes. The owner's
// own labels are never touched, and a sync of unchanged state writes
// nothing.
func TestServiceExportExports(t *testing.T) {
	const ns = "e2e-mcs-export"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	require.NoError(t, west.Apply(ctx, harness.ClusterIPService(ns, "api", 80, map[string]string{"team": "a"})))
	p, metrics := startExporter(t, "west", "paris")
	startController(t, "controller")

	se := createServiceExport(t, "west", ns, "api")
	requireStamp(t, "west", ns, "api", labels.ModeGateway, se.CreationTimestamp.Time)
	requireConditions(t, "west", ns, "api", map[string]string{
		"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "False/NoConflicts"})
	requireMirror(t, ns, "api-west", true)

	// Unchanged state writes nothing: a change to the Service that does
	// not concern the export is synced (syncs_total moves) without a
	// write (writes_total stays).
	applied := map[string]string{"verb": "apply", "resource": "services"}
	status := map[string]string{"verb": "update", "resource": "serviceexports/status"}
	success := map[string]string{"result": "success"}
	before := [3]float64{metric(t, metrics, "coredns_mcmirror_controller_writes_total", applied),
		metric(t, metrics, "coredns_mcmirror_controller_writes_total", status),
		metric(t, metrics, "coredns_mcmirror_controller_syncs_total", success)}
	require.Positive(t, before[0])
	require.Positive(t, before[1])
	_, err := west.Client.CoreV1().Services(ns).Patch(ctx, "api", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"touched":"yes"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, metric(c, metrics, "coredns_mcmirror_controller_syncs_total", success), before[2])
	}, wait, tick)
	env.RequireAlive(t, p)
	assert.Equal(t, before[0], metric(t, metrics, "coredns_mcmirror_controller_writes_total", applied))
	assert.Equal(t, before[1], metric(t, metrics, "coredns_mcmirror_controller_writes_total", status))

	annotateExport(t, "west", ns, "api", labels.ModeFlat)
	requireStamp(t, "west", ns, "api", labels.ModeFlat, se.CreationTimestamp.Time)

	annotateExport(t, "west", ns, "api", "mesh")
	requireConditions(t, "west", ns, "api", map[string]string{"Valid": "False/InvalidMode", "Ready": "False/Failed"})
	requireStamp(t, "west", ns, "api", "", time.Time{})
	requireMirror(t, ns, "api-west", false)

	annotateExport(t, "west", ns, "api", "")
	requireStamp(t, "west", ns, "api", labels.ModeGateway, se.CreationTimestamp.Time)
	requireConditions(t, "west", ns, "api", map[string]string{"Valid": "True/Valid", "Ready": "True/Ready"})
	requireMirror(t, ns, "api-west", true)

	require.NoError(t, mcsClient(t, "west").MulticlusterV1beta1().ServiceExports(ns).Delete(ctx, "api", metav1.DeleteOptions{}))
	requireStamp(t, "west", ns, "api", "", time.Time{})
	requireMirror(t, ns, "api-west", false)

	// A ServiceExport before its Service: not valid until the Service
	// comes, then stamped.
	ghost := createServiceExport(t, "west", ns, "late")
	requireConditions(t, "west", ns, "late", map[string]string{"Valid": "False/NoService", "Ready": "False/Failed"})
	require.NoError(t, west.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: late, namespace: %s, labels: {team: a}}
spec: {clusterIP: None, selector: {app: late}, ports: [{port: 5432}]}
`, ns)))
	requireStamp(t, "west", ns, "late", labels.ModeGateway, ghost.CreationTimestamp.Time)
	requireConditions(t, "west", ns, "late", map[string]string{"Valid": "True/Valid", "Ready": "True/Ready"})
	env.RequireAlive(t, p)
}

// Two clusters export one Service with different ports: both
// ServiceExports say Conflict, with the specification's reason, until the
// ports agree.
func TestServiceExportConflict(t *testing.T) {
	const ns = "e2e-mcs-conflict"
	ctx := setUp(t, ns, "west", "paris")
	require.NoError(t, env.Cluster("west").Apply(ctx, clusterIPService(ns, "db", 5432, "")))
	require.NoError(t, env.Cluster("paris").Apply(ctx, clusterIPService(ns, "db", 5433, "")))
	startExporter(t, "west", "paris")
	startExporter(t, "paris", "west")
	createServiceExport(t, "west", ns, "db")
	requireConditions(t, "west", ns, "db", map[string]string{"Ready": "True/Ready", "Conflict": "False/NoConflicts"})
	createServiceExport(t, "paris", ns, "db")
	conflict := map[string]string{"Valid": "True/Valid", "Conflict": "True/" + string(mcsv1beta1.ServiceExportReasonPortConflict)}
	requireConditions(t, "west", ns, "db", conflict)
	requireConditions(t, "paris", ns, "db", conflict)

	require.NoError(t, env.Cluster("paris").Apply(ctx, clusterIPService(ns, "db", 5432, "")))
	agree := map[string]string{"Conflict": "False/NoConflicts"}
	requireConditions(t, "west", ns, "db", agree)
	requireConditions(t, "paris", ns, "db", agree)
}

// The cluster's ID from the About API must be --cluster: another value is
// refused at start with exit status 2, naming both; the same value starts.
func TestClusterIDMustMatch(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	paris := env.Cluster("paris")
	require.NoError(t, paris.SetClusterProperty(ctx, "cluster.clusterset.k8s.io", "lyon"))
	p, _ := startExporter(t, "paris", "west")
	select {
	case <-p.Done():
	case <-time.After(wait):
		t.Fatalf("the controller did not exit:\n%s", p.Tail(20))
	}
	_, err := p.Exited()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, p.Tail(5), `has the value "lyon" but the configured cluster name is "paris"`)

	require.NoError(t, paris.SetClusterProperty(ctx, "cluster.clusterset.k8s.io", "paris"))
	p, _ = startExporter(t, "paris", "west")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, p.Tail(50), `"Start-up sweep"`)
	}, wait, tick)
	env.RequireAlive(t, p)
}

// A Service stamped by hand (serviceexport.mcmirror.dev/mode, and a time
// dated back), without a ServiceExport, is not exported: the exporting
// cluster's controller removes the stamp (the owner's labels kept), with
// an Event on the Service and a count in mcs_refused_total.
func TestServiceExportStampByHand(t *testing.T) {
	const ns = "e2e-mcs-byhand"
	ctx := setUp(t, ns, "west")
	west := env.Cluster("west")
	p, metrics := startExporter(t, "west", "paris")
	refused := map[string]string{"reason": controller.ReasonStampRefused}
	var before float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		before = metric(c, metrics, "coredns_mcmirror_controller_mcs_refused_total", refused)
	}, wait, tick)

	require.NoError(t, west.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: %s
  labels: {team: a, %s: gateway}
  annotations: {%s: "1970-01-01T00:00:00Z"}
spec:
  selector: {app: api}
  ports: [{name: http, port: 80}]
`, ns, labels.ServiceExportMode, labels.ServiceExportCreated)))
	svc := service(t, west, ns, "api")
	requireStamp(t, "west", ns, "api", "", time.Time{})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, hasEvent(c, "west", ns, func(e corev1.Event) bool {
			return e.Reason == controller.ReasonStampRefused && e.InvolvedObject.UID == svc.UID
		}), "a %s Event on the Service", controller.ReasonStampRefused)
		assert.Greater(c, metric(c, metrics, "coredns_mcmirror_controller_mcs_refused_total", refused), before)
	}, wait, tick)
	env.RequireAlive(t, p)
}

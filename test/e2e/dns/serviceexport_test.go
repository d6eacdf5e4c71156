package dns_test

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// A Service exported only by the ServiceExport stamp (the label
// serviceexport.mcmirror.dev/mode, no Linkerd label) is answered in east in
// the stamp's mode: web, stamped gateway, by the ClusterIP of its mirror in
// east (made here as the controller makes one); api, stamped flat, by its
// pod's address. Once the stamp goes, mcmirror claims neither any more.
func TestServiceExportStamp(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const ns = "svcexport"
	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+stampedService(ns, "web", labels.ModeGateway, "")+
		"---\n"+stampedService(ns, "api", labels.ModeFlat, "None")))
	require.NoError(t, west.Apply(ctx, sliceOf(t, ns, "api", map[string]string{"api-0": "10.203.0.1"})))
	svc, err := west.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, svc.Labels, labels.Exported, "web carries the stamp only")

	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)+fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: web-west, namespace: %s, labels: {%s: "true", %s: west}}
spec:
  ports: [{name: http, port: 80}]
`, ns, labels.MirroredService, labels.ClusterName)))
	mirrorIP := clusterIP(t, east, ns, "web-west")

	s := startDNS(t, []string{"west"})
	name := func(n string) string { return n + "." + ns + "." + zone }
	eventuallyAnswers(t, s, name("web-west"), []string{mirrorIP})
	// The kubernetes plugin would answer web-west from the mirror too; only
	// mcmirror answers -global, and the pods of a flat export.
	eventuallyAnswers(t, s, name("web-global"), []string{mirrorIP})
	eventuallyAnswers(t, s, name("api-west"), []string{"10.203.0.1"})
	eventuallyAnswers(t, s, name("api-0.api-west"), []string{"10.203.0.1"})
	const claimed = `coredns_mcmirror_answers_total{kind="cluster",rcode="NOERROR"}`
	before := s.Value(t, claimed)
	require.Equal(t, []string{mirrorIP}, harness.Answers(s.Ask(t, "udp", name("web-west"), dns.TypeA)))
	require.Equal(t, before+1, s.Value(t, claimed), "web-west answered by mcmirror")

	// The stamp goes.
	require.NoError(t, west.LabelService(ctx, ns, "web", labels.ServiceExportMode, ""))
	require.NoError(t, west.LabelService(ctx, ns, "api", labels.ServiceExportMode, ""))
	eventuallyRcode(t, s, name("web-global"), dns.RcodeNameError)
	eventuallyRcode(t, s, name("api-west"), dns.RcodeNameError)
	eventuallyRcode(t, s, name("api-0.api-west"), dns.RcodeNameError)
	// web-west goes on down the chain: the kubernetes plugin answers the
	// mirror that is still there (the controller would delete it), and
	// mcmirror counts no answer.
	before = s.Value(t, claimed)
	assert.Equal(t, []string{mirrorIP}, harness.Answers(s.Ask(t, "udp", name("web-west"), dns.TypeA)))
	assert.Equal(t, before, s.Value(t, claimed), "web-west no longer answered by mcmirror")
	env.RequireAlive(t, s.Process)
}

// stampedService is Service ns/name (port http 80) labelled with the
// ServiceExport stamp only, in mode; clusterIP "None" makes it headless,
// "" has one allocated. It has no selector: its EndpointSlices are the
// test's.
func stampedService(ns, name, mode, clusterIP string) string {
	ip := ""
	if clusterIP != "" {
		ip = "\n  clusterIP: " + clusterIP
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: {%[3]s: %[4]s}}
spec:%[5]s
  ports: [{name: http, port: 80}]
`, ns, name, labels.ServiceExportMode, mode, ip)
}

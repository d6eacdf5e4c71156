package dns_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// In import mode the DNS answers from what east's controller wrote in
// east, not from the controller: a client asking all along gets the right
// answer while the leading controller dies (SIGKILL, no Lease released)
// and the other replica takes over, and what changes in paris afterwards
// comes through the new leader.
func TestImportSourceControllerFailover(t *testing.T) {
	ctx, east, _, paris := setUp(t)
	const ns, lease = "failover", "mcmirror-failover"
	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)))
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, 2, labels.ExportFlat)))
	eps := paris.WaitEndpoints(t, ns, "nginx-svc", 2)

	args := []string{"--mirror-flat-endpoints", "--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-name", lease,
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"}
	start := func(name string) *harness.Controller {
		return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"paris"}, Parts: harness.FleetController,
			EgressPorts: "30000-39999", Controller: harness.ControllerOptions{Name: name, Args: args}}).Controller
	}
	// The Lease names its holder by host, PID and start time.
	waitLeader := func(c *harness.Controller) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			l, err := east.Client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
			if assert.NoError(ct, err) && assert.NotNil(ct, l.Spec.HolderIdentity) {
				assert.Contains(ct, *l.Spec.HolderIdentity, fmt.Sprintf("_%d_", c.PID))
			}
		}, 60*time.Second, 100*time.Millisecond, "%s leads", c.Name)
	}
	first := start("controller-a")
	waitLeader(first)
	second := start("controller-b")

	s := startDNS(t, nil, "source import")
	name := "nginx-svc-paris." + ns + "." + zone
	eventuallyAnswers(t, s, name, values(eps))

	// The client: every answer must be NOERROR with addresses of paris's
	// pods, before the scale below or after it.
	var asked, wrong atomic.Int64
	var lastWrong atomic.Value
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		client := &dns.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r, _, err := client.Exchange(m, s.Addr)
			asked.Add(1)
			if why := checkPods(r, err, paris, ns); why != "" {
				wrong.Add(1)
				lastWrong.Store(why)
			}
		}
	}()

	require.NoError(t, first.Signal(syscall.SIGKILL))
	<-first.Done()
	waitLeader(second)
	require.NoError(t, paris.Scale(ctx, ns, "nginx-set", 3))
	eps = paris.WaitEndpoints(t, ns, "nginx-svc", 3)
	eventuallyAnswers(t, s, name, values(eps))

	close(stop)
	<-done
	env.RequireAlive(t, s.Process, second.Process)
	require.Positive(t, asked.Load())
	assert.Zero(t, wrong.Load(), "wrong answers of %d, the last: %v", asked.Load(), lastWrong.Load())
	t.Logf("%d answers through the failover, none wrong", asked.Load())
}

// checkPods says what is wrong with an A answer that should be addresses of
// pods of nginx-set in paris's namespace ns, or "".
func checkPods(r *dns.Msg, err error, paris *harness.Cluster, ns string) string {
	if err != nil {
		return err.Error()
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return fmt.Sprintf("%s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	var bad []string
	for _, a := range harness.Answers(r) {
		if ip, err := netip.ParseAddr(a); err != nil || !paris.PodCIDR.Contains(ip) {
			bad = append(bad, a)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return "not paris's pods: " + strings.Join(bad, " ")
	}
	return ""
}

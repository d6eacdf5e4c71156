package harness

import (
	"testing"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// GatewayCA is the trust root of the gateways that tests of this
// environment start: one for the environment, made at its first use.
func (e *Env) GatewayCA(t testing.TB) *gatewaytest.CA {
	t.Helper()
	e.gwCAOnce.Do(func() { e.gwCA, e.gwCAErr = gatewaytest.NewCA("mcmirror e2e gateways") })
	if e.gwCAErr != nil {
		t.Fatalf("harness: gateway CA: %v", e.gwCAErr)
	}
	return e.gwCA
}

// GatewayTLS issues, from GatewayCA, a gateway certificate for each
// cluster named into a directory of the test t, and returns them by
// cluster.
func (e *Env) GatewayTLS(t testing.TB, clusters ...string) map[string]gatewaytest.Files {
	t.Helper()
	ca, dir := e.GatewayCA(t), t.TempDir()
	out := map[string]gatewaytest.Files{}
	for _, c := range clusters {
		f, err := ca.IssueFiles(dir, c, gatewaytest.Options{})
		if err != nil {
			t.Fatalf("harness: gateway certificate of %s: %v", c, err)
		}
		out[c] = f
	}
	return out
}

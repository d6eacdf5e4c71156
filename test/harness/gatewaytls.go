package harness

import (
	"fmt"
	"testing"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
)

// GatewayCA is the trust root of the gateways that tests of this
// environment start: one for the environment, made at its first use.
func (e *Env) GatewayCA(t testing.TB) *gatewaytest.CA {
	t.Helper()
	ca, err := e.gatewayCA()
	if err != nil {
		t.Fatalf("harness: gateway CA: %v", err)
	}
	return ca
}

func (e *Env) gatewayCA() (*gatewaytest.CA, error) {
	e.gwCAOnce.Do(func() { e.gwCA, e.gwCAErr = gatewaytest.NewCA("mcmirror e2e gateways") })
	return e.gwCA, e.gwCAErr
}

// GatewayTLS issues, from GatewayCA, a gateway certificate for each
// cluster named into a directory of the test t, and returns them by
// cluster.
func (e *Env) GatewayTLS(t testing.TB, clusters ...string) map[string]gatewaytest.Files {
	t.Helper()
	out, err := e.gatewayTLS(t.TempDir(), clusters...)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return out
}

// gatewayTLS is GatewayTLS into dir.
func (e *Env) gatewayTLS(dir string, clusters ...string) (map[string]gatewaytest.Files, error) {
	ca, err := e.gatewayCA()
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %w", err)
	}
	out := map[string]gatewaytest.Files{}
	for _, c := range clusters {
		if out[c], err = ca.IssueFiles(dir, c, gatewaytest.Options{}); err != nil {
			return nil, fmt.Errorf("gateway certificate of %s: %w", c, err)
		}
	}
	return out, nil
}

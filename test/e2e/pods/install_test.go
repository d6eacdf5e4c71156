package pods

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var aliveRE = regexp.MustCompile(`"cluster":\s*"west"[^}]*"alive":\s*true|"alive":\s*true[^}]*"cluster":\s*"west"`)

var (
	installOnce sync.Once
	installErr  error
	installLog  string
)

// installed gives both clusters kubeadm's CoreDNS, then runs the Install
// section of deploy/README.md on them (harness.InstallFromREADME), once per
// package, and fails t if that failed.
func installed(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		for _, c := range env.Clusters() {
			if installErr = c.InstallKubeadmDNS(ctx); installErr != nil {
				return
			}
		}
		installLog, installErr = env.InstallFromREADME(ctx)
		// Step 8, "Check", says what the user sees: west's page, fetched
		// from east by name, and west alive in east's gateway's view.
		switch {
		case installErr != nil:
		case !strings.Contains(installLog, "hello from a pod of west"):
			installErr = fmt.Errorf("step 8 did not print west's page")
		case !aliveRE.MatchString(installLog):
			installErr = fmt.Errorf("step 8: east's gateway does not see west alive")
		}
	})
	if installErr != nil {
		t.Fatalf("deploy/README.md, Install, step by step: %v\n%s", installErr, installLog)
	}
}

package check

import (
	"fmt"
	"time"
)

// LeaseFacts is what check found of the controller's leader election.
type LeaseFacts struct {
	// Controller is whether the controller is installed; Cfg its flags and
	// Replicas how many it runs.
	Controller bool
	Cfg        ControllerConfig
	Replicas   int32
	// Found is whether the Lease exists; Err why it could not be read.
	Found bool
	Err   string
	// Holder, RenewTime and Duration are the Lease's spec.
	Holder    string
	RenewTime time.Time
	Duration  time.Duration
}

func evalLeader(f LeaseFacts, now time.Time) Result {
	r := Result{ID: "controller-leader"}
	lease := f.Cfg.LeaseNamespace + "/" + f.Cfg.LeaseName
	fix := "kubectl -n mcmirror get pods -l app.kubernetes.io/name=mcmirror-controller; kubectl -n mcmirror logs deployment/mcmirror-controller"
	switch {
	case !f.Controller:
		return r.judged(OK, "no controller installed, so no leader to elect", "")
	case !f.Cfg.LeaderElect && f.Replicas > 1:
		return r.judged(Fail, fmt.Sprintf("the controller runs %d replicas without --leader-elect: they write at once, against each other", f.Replicas),
			"add --leader-elect --leader-elect-namespace=mcmirror to its arguments (deploy/controller.yaml), or run one replica")
	case !f.Cfg.LeaderElect:
		return r.judged(OK, "one controller replica, without leader election", "")
	case f.Err != "":
		return r.judged(Warn, fmt.Sprintf("could not read Lease %s: %s", lease, f.Err), "run check as a user who may get leases in "+f.Cfg.LeaseNamespace)
	case !f.Found:
		return r.judged(Fail, fmt.Sprintf("no Lease %s: no controller replica has ever led", lease), fix)
	case f.Holder == "":
		return r.judged(Fail, fmt.Sprintf("Lease %s is held by nobody (released %s): no controller leads", lease, ago(f.RenewTime, now)), fix)
	case f.RenewTime.IsZero() || now.Sub(f.RenewTime) > f.Duration:
		return r.judged(Fail, fmt.Sprintf("Lease %s of %s was last renewed %s, longer than its %s: the leader is gone or stuck", lease, f.Holder, ago(f.RenewTime, now), f.Duration), fix)
	}
	return r.judged(OK, fmt.Sprintf("%s leads (Lease %s renewed %s, within its %s)", f.Holder, lease, ago(f.RenewTime, now), f.Duration), "")
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		return "just now"
	}
	return d.Round(100*time.Millisecond).String() + " ago"
}

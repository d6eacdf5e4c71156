package faults_test

import (
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

// ctlLinkErrors is the controller's count of failed lists and watches of
// cluster for reason (unreachable, unauthorized, forbidden, error).
func ctlLinkErrors(c require.TestingT, ctl *harness.Controller, cluster, reason string) float64 {
	return harness.RequireSeries(c, ctl.MetricsURL(), fmt.Sprintf(`coredns_mcmirror_controller_link_errors_total{cluster=%q,reason=%q}`, cluster, reason))
}

// ctlLinkUp is the controller's link_up of cluster, -1 when it is not
// exported.
func ctlLinkUp(c require.TestingT, ctl *harness.Controller, cluster string) float64 {
	v, ok := harness.SeriesValue(c, ctl.MetricsURL(), fmt.Sprintf(`coredns_mcmirror_controller_link_up{cluster=%q}`, cluster))
	if !ok {
		return -1
	}
	return v
}

package metric

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestSetNamesAndRegisters(t *testing.T) {
	s := Set{Namespace: "coredns", Subsystem: "metric_test"}
	events := s.Counter("events_total", "Events.", "cluster")
	events.WithLabelValues("east").Add(2)
	s.Gauge1("up", "Up.").Set(1)
	s.Histogram("seconds", "Seconds.", prometheus.DefBuckets, "verb").WithLabelValues("get").Observe(0.1)
	n, err := testutil.GatherAndCount(prometheus.DefaultGatherer,
		"coredns_metric_test_events_total", "coredns_metric_test_up", "coredns_metric_test_seconds")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, 2.0, testutil.ToFloat64(events.WithLabelValues("east")))
}

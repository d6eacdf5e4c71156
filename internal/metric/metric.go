// Package metric declares the Prometheus metrics of one component, one
// line each, registered with the default registry (which CoreDNS's
// prometheus plugin and the components' /metrics serve).
package metric

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Set is where a component's metrics are named: namespace_subsystem_name.
type Set struct{ Namespace, Subsystem string }

// Counter is a counter with the given labels.
func (s Set) Counter(name, help string, labels ...string) *prometheus.CounterVec {
	return promauto.NewCounterVec(prometheus.CounterOpts(s.opts(name, help)), labels)
}

// Gauge is a gauge with the given labels.
func (s Set) Gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return promauto.NewGaugeVec(prometheus.GaugeOpts(s.opts(name, help)), labels)
}

// Histogram is a histogram with the given buckets and labels.
func (s Set) Histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	o := s.opts(name, help)
	return promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets,
	}, labels)
}

// Counter1, Gauge1 and Histogram1 are the same without labels.
func (s Set) Counter1(name, help string) prometheus.Counter {
	return promauto.NewCounter(prometheus.CounterOpts(s.opts(name, help)))
}

func (s Set) Gauge1(name, help string) prometheus.Gauge {
	return promauto.NewGauge(prometheus.GaugeOpts(s.opts(name, help)))
}

func (s Set) Histogram1(name, help string, buckets []float64) prometheus.Histogram {
	o := s.opts(name, help)
	return promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets,
	})
}

func (s Set) opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: s.Namespace, Subsystem: s.Subsystem, Name: name, Help: help}
}

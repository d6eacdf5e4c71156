// Package stats summarizes the benchmark commands' runs.
package stats

import "slices"

// Summary is the median, least and greatest of n values.
type Summary struct {
	N             int
	Med, Min, Max float64
}

// Of summarizes v; its zero value when v is empty.
func Of(v []float64) Summary {
	if len(v) == 0 {
		return Summary{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	st := Summary{N: len(v), Min: v[0], Max: v[len(v)-1], Med: v[len(v)/2]}
	if len(v)%2 == 0 {
		st.Med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return st
}

// Median is the median of v, the mean of the middle two of an even number;
// 0 when v is empty.
func Median(v []float64) float64 { return Of(v).Med }

// Rank is the q-quantile (0..1) of sorted, by nearest rank.
func Rank[T any](sorted []T, q float64) T {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

package harness

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
)

// MetricValue is ScrapeMetric for a test: the sum of the samples of name
// at url whose labels include lbl, 0 when there is none (a counter with
// labels appears at its first increment). t may be a *testing.T or,
// inside EventuallyWithT, the collector.
func MetricValue(t require.TestingT, url, name string, lbl map[string]string) float64 {
	v, _, err := ScrapeMetric(url, name, lbl)
	require.NoError(t, err)
	return v
}

// RequireMetric is MetricValue, but fails t when no sample matches: an
// absent series is an error, not a zero, or a check of a value that must
// not have moved would pass against a process that never exports it.
func RequireMetric(t require.TestingT, url, name string, lbl map[string]string) float64 {
	v, ok, err := ScrapeMetric(url, name, lbl)
	require.NoError(t, err)
	require.True(t, ok, "no series %s%v at %s", name, lbl, url)
	return v
}

// ScrapeSeries reads the Prometheus text exposition at url and returns the
// value of the sample whose name and labels are exactly series, e.g.
// `coredns_mcmirror_link_up{cluster="west"}`, and whether there is one.
func ScrapeSeries(url, series string) (float64, bool, error) {
	body, err := getBody(url, 5*time.Second)
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		v, ok := strings.CutPrefix(line, series+" ")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("bad sample %q", line)
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("bad sample %q: %w", line, err)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// GetOK GETs url, which must answer 200.
func GetOK(url string) error {
	_, err := getBody(url, 2*time.Second)
	return err
}

// getBody GETs url within timeout and returns the body of its 200 answer.
func getBody(url string, timeout time.Duration) ([]byte, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// SeriesValue is ScrapeSeries for a test: the value of series at url, and
// whether it is exported.
func SeriesValue(t require.TestingT, url, series string) (float64, bool) {
	v, ok, err := ScrapeSeries(url, series)
	require.NoError(t, err)
	return v, ok
}

// RequireSeries is SeriesValue, but fails t when series is not exported.
func RequireSeries(t require.TestingT, url, series string) float64 {
	v, ok := SeriesValue(t, url, series)
	require.True(t, ok, "%s is not exported at %s", series, url)
	return v
}

// Value is the value of the server's sample series (name and labels
// exactly), 0 when it is not exported (a counter with labels appears at
// its first increment).
func (s *DNSServer) Value(t require.TestingT, series string) float64 {
	v, _ := SeriesValue(t, s.MetricsURL, series)
	return v
}

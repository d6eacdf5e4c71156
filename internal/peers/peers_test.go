package peers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What Encode writes, Decode reads back, and the list is sorted by
// cluster with the field names the clients rely on.
func TestEncodeDecode(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	states := map[string]State{
		"west":  {Alive: false, Probed: true, Since: since, Error: "dial tcp: connection refused"},
		"paris": {Alive: true, Probed: true, Since: since, Latency: 3 * time.Millisecond},
	}
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, states))
	assert.JSONEq(t, `[
		{"cluster":"paris","alive":true,"probed":true,"since":"2026-01-02T03:04:05Z","latencyNanos":3000000},
		{"cluster":"west","alive":false,"probed":true,"since":"2026-01-02T03:04:05Z","latencyNanos":0,"error":"dial tcp: connection refused"}
	]`, buf.String())
	assert.Less(t, strings.Index(buf.String(), "paris"), strings.Index(buf.String(), "west"), "sorted by cluster")

	got, err := Decode(&buf)
	require.NoError(t, err)
	assert.Equal(t, states, got)

	buf.Reset()
	require.NoError(t, Encode(&buf, nil))
	assert.Equal(t, "[]\n", buf.String(), "no peers: an empty list, not null")
}

// Decode takes only a list of objects that each name a cluster and say
// whether it is alive.
func TestDecodeRefuses(t *testing.T) {
	for body, want := range map[string]string{
		``:                                  "not a list of peer states",
		`<html></html>`:                     "not a list of peer states",
		`{"cluster":"west","alive":true}`:   "not a list of peer states",
		`[{"cluster":"west","alive":"no"}]`: "not a list of peer states",
		`[{"alive":true}]`:                  "peer state 0 has no cluster or no alive",
		`[{"cluster":"west","alive":true},{"cluster":"paris"}]`: "peer state 1 has no cluster or no alive",
	} {
		_, err := Decode(strings.NewReader(body))
		assert.ErrorContains(t, err, want, "body %q", body)
	}
	got, err := Decode(strings.NewReader(`[{"cluster":"west","alive":false}]`))
	require.NoError(t, err)
	assert.Equal(t, map[string]State{"west": {}}, got, "alive false, given, is not absent")
}

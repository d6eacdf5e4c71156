package remote

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The backoff of a cluster's retries stays within 3 s however long the
// cluster is down (client-go's reflector default grows to a minute).
func TestBackoffBound(t *testing.T) {
	b := Backoff
	for i := range 1000 {
		d := b.Step()
		assert.LessOrEqual(t, d, 3*time.Second, "step %d", i)
		assert.GreaterOrEqual(t, d, 250*time.Millisecond, "step %d", i)
	}
}

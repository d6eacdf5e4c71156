package mcmirror

import (
	"testing"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stretchr/testify/assert"
)

func TestCountAnswer(t *testing.T) {
	for k := range index.NumKinds {
		for _, rc := range answerRcodes {
			c := answers.WithLabelValues(k.String(), dns.RcodeToString[rc])
			before := testutil.ToFloat64(c)
			countAnswer(k, rc)
			assert.EqualValues(t, 1, testutil.ToFloat64(c)-before, "kind %s rcode %s", k, dns.RcodeToString[rc])
		}
	}
	// An rcode the plugin never gives is not counted, nor a new series made.
	countAnswer(index.KindPod, dns.RcodeRefused)
	assert.Equal(t, int(index.NumKinds)*len(answerRcodes), testutil.CollectAndCount(answers), "answer series")
}

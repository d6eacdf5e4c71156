package mcmirror

import (
	"testing"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountAnswer(t *testing.T) {
	for k := range index.NumKinds {
		for _, rc := range answerRcodes {
			c := answers.WithLabelValues(k.String(), dns.RcodeToString[rc])
			before := testutil.ToFloat64(c)
			countAnswer(k, rc)
			if got := testutil.ToFloat64(c) - before; got != 1 {
				t.Errorf("kind %s rcode %s: +%v, want +1", k, dns.RcodeToString[rc], got)
			}
		}
	}
	// An rcode the plugin never gives is not counted, nor a new series made.
	countAnswer(index.KindPod, dns.RcodeRefused)
	if n := testutil.CollectAndCount(answers); n != int(index.NumKinds)*len(answerRcodes) {
		t.Errorf("%d answer series, want %d", n, int(index.NumKinds)*len(answerRcodes))
	}
}

package mcmirror

import (
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
)

func TestReady(t *testing.T) {
	src := fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	if !m.Ready() {
		t.Error("not ready with a synced source")
	}
	src.synced = false
	if m.Ready() {
		t.Error("ready with a source that has not synced")
	}
}

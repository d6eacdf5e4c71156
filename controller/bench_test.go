package controller

import (
	"fmt"
	"testing"
)

// BenchmarkSyncUnchanged measures a sync of a converged headless export of
// 100 pods: what every remote event costs when nothing has to be written.
func BenchmarkSyncUnchanged(b *testing.B) {
	hosts := make([]string, 100)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("db-%d", i)
	}
	f := newFixture(b, fixtureOptions{}, west(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", hosts...)))
	f.converge("west/default/db")
	b.ReportAllocs()
	for b.Loop() {
		if err := f.c.sync(f.ctx, "west/default/db"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncExport measures mirroring a new ClusterIP export (two
// writes) against a fake clientset: the controller's own share of the
// export-to-ClusterIP time.
func BenchmarkSyncExport(b *testing.B) {
	f := newFixture(b, fixtureOptions{ports: PortRange{First: 1, Last: 65535}}, west())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		name := fmt.Sprintf("svc-%d", i)
		i++
		f.remote("west", exported("default", name, "true", false, tcp("http", 80)))
		b.StartTimer()
		if err := f.c.sync(f.ctx, "west/default/"+name); err != nil {
			b.Fatal(err)
		}
	}
}

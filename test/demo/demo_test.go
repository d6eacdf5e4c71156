package main

import "testing"

// The demo's dig lines work: run it as `make demo` does, stopping after them.
func TestDemo(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := run(port, true); err != nil {
		t.Fatal(err)
	}
}

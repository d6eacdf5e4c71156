package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
)

// corefile.example is a whole cluster DNS Corefile whose every directive is
// compiled into coredns-mc. (The mcmirror block's options are checked by the
// plugin's own tests.)
func TestCorefileExampleParses(t *testing.T) {
	data, err := os.ReadFile("../../corefile.example")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := caddyfile.Parse("corefile.example", bytes.NewReader(data), dnsserver.Directives)
	if err != nil {
		t.Fatalf("corefile.example: %v", err)
	}
	seen := map[string]bool{}
	for _, b := range blocks {
		for d := range b.Tokens {
			seen[d] = true
		}
	}
	for _, want := range []string{"mcmirror", "kubernetes", "ready"} {
		if !seen[want] {
			t.Errorf("corefile.example has no %s block", want)
		}
	}
}

package main

import (
	"slices"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestMcmirrorRightBeforeKubernetes(t *testing.T) {
	i := slices.Index(dnsserver.Directives, "mcmirror")
	if i < 0 || dnsserver.Directives[i+1] != "kubernetes" {
		t.Fatalf("mcmirror must come right before kubernetes: %v", dnsserver.Directives)
	}
	if slices.Contains(dnsserver.Directives[i+1:], "mcmirror") {
		t.Fatal("mcmirror listed twice")
	}
	if !slices.Contains(caddy.ListPlugins()["others"], "dns.mcmirror") {
		t.Fatalf("plugin mcmirror is not registered: %v", caddy.ListPlugins())
	}
}

func TestInsertBefore(t *testing.T) {
	got := insertBefore([]string{"a", "b", "c"}, "b", "x")
	if !slices.Equal(got, []string{"a", "x", "b", "c"}) {
		t.Fatalf("got %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a missing directive")
		}
	}()
	insertBefore([]string{"a"}, "zz", "x")
}

package main

import (
	"slices"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/stretchr/testify/require"
)

func TestMcmirrorRightBeforeKubernetes(t *testing.T) {
	i := slices.Index(dnsserver.Directives, "mcmirror")
	if i < 0 || dnsserver.Directives[i+1] != "kubernetes" {
		t.Fatalf("mcmirror must come right before kubernetes: %v", dnsserver.Directives)
	}
	require.NotContains(t, dnsserver.Directives[i+1:], "mcmirror", "mcmirror listed twice")
	require.Contains(t, caddy.ListPlugins()["others"], "dns.mcmirror", "plugin mcmirror is not registered: %v", caddy.ListPlugins())
}

func TestInsertBefore(t *testing.T) {
	require.Equal(t, []string{"a", "x", "b", "c"}, insertBefore([]string{"a", "b", "c"}, "b", "x"))
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a missing directive")
		}
	}()
	insertBefore([]string{"a"}, "zz", "x")
}

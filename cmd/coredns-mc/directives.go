package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"

	_ "github.com/mcmirror/mcmirror/plugin/mcmirror" // registers mcmirror
)

// The plugin chain runs in the order of dnsserver.Directives, whatever the
// order in a Corefile. mcmirror goes right before kubernetes: it answers the
// multi-cluster names and hands every other name to kubernetes.
func init() {
	dnsserver.Directives = insertBefore(dnsserver.Directives, "kubernetes", "mcmirror")
}

// insertBefore returns list with name inserted before the first occurrence
// of before; it panics if before is missing, which only a change of CoreDNS
// could cause and no binary should survive.
func insertBefore(list []string, before, name string) []string {
	if i := slices.Index(list, before); i >= 0 {
		return slices.Insert(slices.Clone(list), i, name)
	}
	panic("coredns-mc: no directive " + before)
}

// Command coredns-mc is CoreDNS with every standard plugin, built as one
// binary for mcmirror's multi-cluster service discovery.
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // the standard plugins
	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }

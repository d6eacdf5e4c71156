package proc

import "github.com/mcmirror/mcmirror/test/harness"

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago and
// that neither it nor the harness handed out before in this process.
func FreePort() (int, error) { return harness.FreeTCPPort() }

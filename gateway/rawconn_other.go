//go:build !unix

package gateway

import "syscall"

// rawCalls: elsewhere, connections keep the ordinary calls (newRawConn
// leaves them alone, and these are never called).
const rawCalls = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.EINVAL }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }
func peekReady(uintptr) bool                        { return true }

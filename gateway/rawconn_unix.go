//go:build unix

package gateway

import (
	"syscall"
	"unsafe"
)

// rawCalls: this system has the raw calls rawConn makes.
const rawCalls = true

// rawRead and rawWrite make one read(2) or write(2) without telling the
// scheduler (syscall.RawSyscall); p is not empty.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

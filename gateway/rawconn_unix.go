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

// peekReady reports whether the socket fd has something to read (data, its
// end, or an error), reading nothing (recv with MSG_PEEK): false makes
// syscall.RawConn.Read wait for it. A raw call, as rawRead.
func peekReady(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}

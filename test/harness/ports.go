package harness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// handedOut records every port this process's port pickers returned. A
// port handed out stays free until its server binds it, so a second pick
// could return it again: two processes launched at once were given the
// same port (a DNS replica's metrics URL answered 404: another replica's
// pprof had the port). A port is handed out once per process, while there
// are ports to spare. Other processes' ports are claim's.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// handOut reports whether port p was not handed out before, and records it.
func handOut(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[p] && len(handedOut.ports) < 8000 {
		return false
	}
	handedOut.ports[p] = true
	return true
}

// portsLockPath records the ports that the harness processes on this
// machine hand out (test packages run side by side, and benchmarks): a
// process holds a lock on byte p of it for each port p it handed out,
// until it exits, when the kernel drops its locks.
const portsLockPath = "/run/mcmirror-ports.lock"

var portsLock struct {
	once sync.Once
	f    *os.File
}

// claim reports whether no other process holds port p, and holds it for
// this one. Where the record cannot be opened, only this process's count.
func claim(p int) bool {
	portsLock.once.Do(func() {
		var err error
		if portsLock.f, err = os.OpenFile(portsLockPath, os.O_CREATE|os.O_RDWR, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "harness: ports are not recorded across processes: %v\n", err)
		}
	})
	if portsLock.f == nil {
		return true
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: int64(p), Len: 1}
	return syscall.FcntlFlock(portsLock.f.Fd(), syscall.F_SETLK, &lk) == nil
}

// freePort returns a TCP port that was free on every address a moment
// ago, that no other call in this process returned and that no other
// harness process holds (claim). It is below the kernel's range of
// ephemeral ports (32768 and up), so that no client connection takes it as
// its own port before the server binds it, or while a server restarted on
// it is down: a fleet makes thousands of connections, and one took an API
// server's port that way, another a DNS server's metrics port. It is above
// the kubelet's and kube-proxy's fixed ports (10248 to 10259) and below
// the egress port windows (20000 and up, controller.go).
func freePort() (int, error) { return pickPort(false) }

// pickPort is freePort; with udp, the port is free for UDP too (a DNS
// server's).
func pickPort(udp bool) (int, error) {
	const low, high = 11000, 20000
	for range 1000 {
		p := low + rand.IntN(high-low)
		if portFree(p, udp) && handOut(p) && claim(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no port in [%d, %d) free, not handed out here before and not held by another harness process", low, high)
}

// portFree reports whether port p can be bound on every address, as a
// server listening on ":p" binds it.
func portFree(p int, udp bool) bool {
	addr := ":" + strconv.Itoa(p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	if !udp {
		return true
	}
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// FreeTCPPort is freePort for the benchmarks, which launch processes
// beside the harness's: one record of the ports handed out.
func FreeTCPPort() (int, error) { return freePort() }

// FreePort returns a port free for both UDP and TCP (freePort).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := pickPort(true)
	require.NoError(t, err)
	return p
}

package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
)

// roleEnv names the role a re-executed test binary plays instead of running
// tests.
const roleEnv = "MCMIRROR_HARNESS_ROLE"

// EchoServer is a Command for RunPod: the test binary itself, re-executed as
// a TCP server on port that greets every connection with one line,
// "hello from <cluster>/<pod>", and then echoes what it receives until the
// client closes its side.
func EchoServer(port int) Command {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return Command{Argv: []string{exe}, Env: []string{roleEnv + "=echo", "MCMIRROR_ECHO_PORT=" + strconv.Itoa(port)}}
}

// FloodServer is a Command for RunPod: the test binary re-executed as a TCP
// server on port that writes n bytes to every connection as soon as it is
// accepted (whether or not the client reads them), then reads and discards
// until the client closes its side. Its writes are the data a stalled
// reader leaves in the proxies on its path.
func FloodServer(port, n int) Command {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return Command{Argv: []string{exe}, Env: []string{roleEnv + "=flood", "MCMIRROR_FLOOD_PORT=" + strconv.Itoa(port), "MCMIRROR_FLOOD_BYTES=" + strconv.Itoa(n)}}
}

// runRoleIfAsked serves the role named in the environment and exits; it
// returns at once when there is none.
func runRoleIfAsked() {
	switch role := os.Getenv(roleEnv); role {
	case "":
		return
	case "echo":
		if err := serveEcho(os.Getenv("MCMIRROR_ECHO_PORT"), os.Getenv("MCMIRROR_POD_NAME")); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "flood":
		if err := serveFlood(os.Getenv("MCMIRROR_FLOOD_PORT"), os.Getenv("MCMIRROR_FLOOD_BYTES")); err != nil {
			fmt.Fprintln(os.Stderr, "flood:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "pod":
		if err := servePod(); err != nil {
			fmt.Fprintln(os.Stderr, "pod:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "fetch":
		out, err := fetch(os.Getenv("MCMIRROR_FETCH"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fetch:", err)
			os.Exit(1)
		}
		fmt.Println(out)
		os.Exit(0)
	case "peers":
		if err := findPeers(os.Getenv("MCMIRROR_PEERS")); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "harness: unknown role %q\n", role)
		os.Exit(2)
	}
}

func serveEcho(port, name string) error {
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "echo: %s listening on %s\n", name, l.Addr())
	return acceptEach(l, func(conn net.Conn) {
		w := bufio.NewWriter(conn)
		fmt.Fprintf(w, "hello from %s\n", name)
		if err := w.Flush(); err != nil {
			return
		}
		_, _ = io.Copy(conn, conn)
	})
}

// acceptEach serves each connection l accepts with handle, on a goroutine
// of its own, and closes it when handle returns; it returns the error that
// ends accepting.
func acceptEach(l net.Listener, handle func(net.Conn)) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer conn.Close()
			handle(conn)
		}()
	}
}

func serveFlood(port, bytes string) error {
	n, err := strconv.Atoi(bytes)
	if err != nil {
		return fmt.Errorf("MCMIRROR_FLOOD_BYTES %q: %w", bytes, err)
	}
	chunk := make([]byte, n)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "flood: %d bytes to each connection on %s\n", n, l.Addr())
	return acceptEach(l, func(conn net.Conn) {
		if _, err := conn.Write(chunk); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, conn)
	})
}

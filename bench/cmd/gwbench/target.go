package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

// The target server, run in west's pod (its own network namespace and
// address) as `gwbench target`. Three ports, one behaviour each:
//
//	sink  reads until the client's half-close, then answers the number of
//	      bytes it read (8 bytes, big-endian) and closes: bulk throughput
//	echo  echoes until the client's half-close: round trips, idle connections
//	once  reads one request of -size bytes, echoes it and closes (the server
//	      closes first, as HTTP/1.0 does): connection set-up rate
const (
	sinkPort = 9000
	echoPort = 9001
	oncePort = 9002
)

func runTarget(args []string) int {
	fs := flag.NewFlagSet("gwbench target", flag.ContinueOnError)
	size := fs.Int("size", 64, "request size of the once port")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	errc := make(chan error, 3)
	for port, serve := range map[int]func(net.Conn){
		sinkPort: serveSink,
		echoPort: serveEcho,
		oncePort: func(c net.Conn) { serveOnce(c, *size) },
	} {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			fmt.Fprintln(os.Stderr, "target:", err)
			return 1
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						continue
					}
					errc <- err
					return
				}
				go serve(c)
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "target %s: sink :%d, echo :%d, once :%d\n", os.Getenv("MCMIRROR_POD_NAME"), sinkPort, echoPort, oncePort)
	err := <-errc
	fmt.Fprintln(os.Stderr, "target:", err)
	return 1
}

func serveSink(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
	}
	var out [8]byte
	binary.BigEndian.PutUint64(out[:], uint64(n))
	_, _ = c.Write(out[:])
}

func serveEcho(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 16<<10)
	// Plain reads and writes (no splice through a pipe): what a server
	// with a buffer does.
	if _, err := io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, buf); err != nil {
		return
	}
	_ = c.(*net.TCPConn).CloseWrite()
}

func serveOnce(c net.Conn, size int) {
	defer c.Close()
	buf := make([]byte, size)
	if _, err := io.ReadFull(c, buf); err != nil {
		return
	}
	_, _ = c.Write(buf)
}

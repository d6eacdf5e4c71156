package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// request is what a client of the ingress asked for: a probe, or a tunnel
// to a destination.
type request struct {
	probe bool
	dest  Destination
}

// readRequest reads one HTTP/1.1 request from r, reading no more than max
// bytes of r. The reader it returns holds the bytes read past the request
// (a client may send its first bytes right behind its CONNECT). On error,
// tooLarge tells whether the request was cut by max.
func readRequest(r io.Reader, max int) (req *http.Request, br *bufio.Reader, tooLarge bool, err error) {
	lr := &io.LimitedReader{R: r, N: int64(max)}
	br = bufio.NewReaderSize(lr, 1024)
	req, err = http.ReadRequest(br)
	if err != nil {
		return nil, br, lr.N == 0, err
	}
	return req, br, false, nil
}

// parseRequest says what a request asks for, or why it is refused. A
// tunnel is asked for with CONNECT and an authority-form target (RFC 9110,
// 9.3.6: nothing but the host and port), which names the destination; the
// Host header plays no part. A probe is GET ProbePath.
func parseRequest(req *http.Request) (request, Reason, error) {
	if req.Method == http.MethodGet && req.URL.Path == ProbePath {
		return request{probe: true}, "", nil
	}
	if req.Method != http.MethodConnect {
		return request{}, ReasonBadRequest, fmt.Errorf("method %s %s: want CONNECT", req.Method, req.URL.Path)
	}
	// net/http also takes "CONNECT /path" (net/rpc), a path or a query
	// after the authority, and user information before it: none of them
	// is a destination.
	if req.URL == nil || req.URL.Host == "" || req.RequestURI != req.URL.Host {
		return request{}, ReasonBadRequest, fmt.Errorf("CONNECT %q: want <name>:<port>", req.RequestURI)
	}
	dest, err := ParseDestination(req.URL.Host)
	if err != nil {
		if errors.Is(err, errAddressLiteral) {
			return request{}, ReasonAddressLiteral, err
		}
		return request{}, ReasonBadRequest, err
	}
	return request{dest: dest}, "", nil
}

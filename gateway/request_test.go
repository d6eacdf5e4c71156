package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a request asks for: a tunnel only from CONNECT with nothing but
// the authority as its target, which names the destination.
func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		dest          Destination
		probe         bool
		reason        Reason
	}{
		{name: "CONNECT", request: connectRequest("web.default:80"), dest: web},
		{name: "pod", request: connectRequest("web-0.web.default:80"), dest: Destination{Namespace: "default", Service: "web", Host: "web-0", Port: 80}},
		{name: "no Host header", request: "CONNECT web.default:80 HTTP/1.1\r\n\r\n", dest: web},
		{name: "the target, not the Host header", request: "CONNECT web.default:80 HTTP/1.1\r\nHost: db.default:5432\r\n\r\n", dest: web},
		{name: "probe", request: "GET " + ProbePath + " HTTP/1.1\r\nHost: west\r\n\r\n", probe: true},
		{name: "a path", request: "CONNECT /web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n", reason: ReasonBadRequest},
		{name: "a path after the authority", request: "CONNECT web.default:80/x HTTP/1.1\r\n\r\n", reason: ReasonBadRequest},
		{name: "a query", request: "CONNECT web.default:80?x HTTP/1.1\r\n\r\n", reason: ReasonBadRequest},
		{name: "user information", request: "CONNECT u@web.default:80 HTTP/1.1\r\n\r\n", reason: ReasonBadRequest},
		{name: "address", request: connectRequest("10.0.0.1:80"), reason: ReasonAddressLiteral},
		{name: "GET", request: "GET / HTTP/1.1\r\nHost: web.default:80\r\n\r\n", reason: ReasonBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _, _, err := readRequest(strings.NewReader(tc.request), 8192)
			require.NoError(t, err)
			got, reason, err := parseRequest(req)
			assert.Equal(t, tc.reason, reason, "%v", err)
			assert.Equal(t, tc.probe, got.probe)
			assert.Equal(t, tc.dest, got.dest)
		})
	}
}

// readRequest reads no more than its limit, and says when the request was
// cut by it.
func TestReadRequestLimit(t *testing.T) {
	long := "CONNECT web.default:80 HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", 1000) + "\r\n\r\n"
	src := &countingReader{r: strings.NewReader(long)}
	_, _, tooLarge, err := readRequest(src, 512)
	require.Error(t, err)
	assert.True(t, tooLarge)
	assert.Equal(t, int64(512), src.n)

	src = &countingReader{r: strings.NewReader(long + "early")}
	req, br, _, err := readRequest(src, len(long)+100)
	require.NoError(t, err)
	assert.Equal(t, "CONNECT", req.Method)
	rest, _ := br.Peek(br.Buffered())
	assert.Equal(t, "early", string(rest))
}

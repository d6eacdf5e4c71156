package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseDestination: any authority either is refused or parses to a
// destination of valid names and a valid port, whose authority (the one
// the egress sends) parses back to the same destination, and is never an
// address.
func FuzzParseDestination(f *testing.F) {
	for _, s := range []string{
		"web.default:80", "web-0.web.default:5432", "a.b:65535", "a.b:0", "a.b:65536", "a.b:080", "a.b:+80", "a.b:-1",
		"web:80", "a.b.c.d:80", "web.default", ":80", "", "[web.default]:80", "[::1]:80", "127.0.0.1:80", "1.2.3.4.5:80",
		"WEB.default:80", "web_1.default:80", ".default:80", "web.:80", "web..default:80", "web.default:80:80",
		strings.Repeat("a", 63) + ".b:1", strings.Repeat("a", 64) + ".b:1", "web.default:٨٠", "[fe80::1%eth0]:80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, authority string) {
		d, err := ParseDestination(authority)
		if err != nil {
			require.Zero(t, d, "%q: error %v with a destination", authority, err)
			return
		}
		require.True(t, d.Port >= 1 && d.Port <= 65535, "%q: port %d", authority, d.Port)
		names := []string{d.Service, d.Namespace}
		if d.Host != "" {
			names = append(names, d.Host)
		}
		for _, n := range names {
			require.Empty(t, validation.IsDNS1123Label(n), "%q: name %q accepted", authority, n)
		}
		s := d.String()
		require.True(t, utf8.ValidString(s) && len(s) <= 3*63+2+1+5, "%q: authority %q", authority, s)
		again, err := ParseDestination(s)
		require.NoError(t, err, "%q parsed to %+v, whose authority %q does not parse", authority, d, s)
		require.Equal(t, d, again, "%q parsed to %+v, whose authority %q parses otherwise", authority, d, s)
	})
}

// FuzzReadRequest: whatever a client sends, the ingress reads no more than
// its limit, never panics, and either refuses with a reason it answers
// with a 4xx or 5xx status of its own, or asks for a probe (GET
// ProbePath) or for the destination named by the target of a CONNECT,
// which the egress's own request for that destination names again.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		connectRequest("web.default:80"),
		connectRequest("web.default:80") + "early bytes",
		connectRequest("db-0.db.default:5432"),
		"CONNECT web.default:80 HTTP/1.1\r\n\r\n",
		"CONNECT web.default:80 HTTP/1.0\r\nHost: other.default:81\r\n\r\n",
		"CONNECT /web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n",
		"CONNECT web.default:80/x HTTP/1.1\r\nHost: web.default:80\r\n\r\n",
		"CONNECT user@web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n",
		"CONNECT http://web.default:80 HTTP/1.1\r\n\r\n",
		"CONNECT 10.0.0.1:80 HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:80 HTTP/1.1\r\n\r\n",
		"CONNECT web%2edefault:80 HTTP/1.1\r\n\r\n",
		"GET " + ProbePath + " HTTP/1.1\r\nHost: west\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: web.default:80\r\n\r\n",
		"CONNECT web.default:80 HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", 600) + "\r\n\r\n",
		"CONNECT web.default:80 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
		"CONNECT web.default:80 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"CONNECT web.default:80 HTTP/1.1\n\n",
		"CONNECT  web.default:80  HTTP/1.1\r\n\r\n",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
		"",
	} {
		f.Add([]byte(s), uint16(512))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		max := int(limit)%4096 + 1
		src := &countingReader{r: bytes.NewReader(data)}
		req, br, tooLarge, err := readRequest(src, max)
		require.LessOrEqual(t, src.n, int64(max), "read past the limit")
		if err != nil {
			require.False(t, tooLarge && src.n != int64(max), "too large after %d bytes of a limit of %d", src.n, max)
			return
		}
		require.NotNil(t, br, "no reader for the bytes after the request")
		// The bytes after the request are the stream's first: they
		// must be the input's own.
		if n := br.Buffered(); n > 0 {
			rest, _ := br.Peek(n)
			require.Equal(t, data[src.n-int64(n):src.n], rest, "bytes after the request, not the input's")
		}
		asked, reason, perr := parseRequest(req)
		if reason != "" {
			require.Error(t, perr, "refused (%s) without an error", reason)
			st := reason.status()
			require.True(t, st >= 400 && st != http.StatusInternalServerError, "refusal %s answers %d", reason, st)
			return
		}
		require.NoError(t, perr, "accepted with an error")
		if asked.probe {
			require.True(t, req.Method == http.MethodGet && req.URL.Path == ProbePath, "a probe from %s %s", req.Method, req.URL)
			return
		}
		require.Equal(t, http.MethodConnect, req.Method, "a tunnel from another method")
		d, err := ParseDestination(req.RequestURI)
		require.NoError(t, err, "target %q", req.RequestURI)
		require.Equal(t, asked.dest, d, "target %q: parsed otherwise than the request", req.RequestURI)
		// What the egress sends for it asks for the same.
		again, _, _, err := readRequest(strings.NewReader(connectRequest(d.String())), 8192)
		require.NoError(t, err, "the egress's request for %+v does not read", d)
		a, reason, err := parseRequest(again)
		require.Empty(t, reason, "the egress's request for %+v: %v", d, err)
		require.Equal(t, d, a.dest, "the egress's request for %+v", d)
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

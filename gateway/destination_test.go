package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDestination(t *testing.T) {
	for _, tc := range []struct {
		authority string
		want      Destination
		literal   bool   // refused as an address literal
		err       string // any other refusal
	}{
		{authority: "web.default:80", want: Destination{Namespace: "default", Service: "web", Port: 80}},
		{authority: "nginx-set-0.nginx-svc.shop:8080", want: Destination{Namespace: "shop", Service: "nginx-svc", Host: "nginx-set-0", Port: 8080}},
		{authority: "a.b:65535", want: Destination{Namespace: "b", Service: "a", Port: 65535}},
		{authority: "127.1:80", want: Destination{Namespace: "1", Service: "127", Port: 80}}, // names, dialled only if a Service is so named
		{authority: "10.0.0.1:80", literal: true},
		{authority: "[::1]:80", literal: true},
		{authority: "[fe80::1%eth0]:80", literal: true},
		{authority: "web.default", err: "missing port"},
		{authority: "web.default:0", err: "bad port"},
		{authority: "web.default:65536", err: "bad port"},
		{authority: "web.default:http", err: "bad port"},
		{authority: "web.default:+80", err: "bad port"},
		{authority: "web:80", err: "want <svc>.<ns>:<port>"},
		{authority: "a.web.default.svc:80", err: "want <svc>.<ns>:<port>"},
		{authority: "web.default.svc.cluster.local:80", err: "want <svc>.<ns>:<port>"},
		{authority: ".web.default:80", err: `""`},
		{authority: "web..:80", err: `""`},
		{authority: "Web.default:80", err: "Web"},
		{authority: "web_1.default:80", err: "web_1"},
		{authority: ":80", err: "want"},
	} {
		t.Run(tc.authority, func(t *testing.T) {
			d, err := ParseDestination(tc.authority)
			switch {
			case tc.literal:
				require.ErrorIs(t, err, errAddressLiteral)
			case tc.err != "":
				require.ErrorContains(t, err, tc.err)
				require.NotErrorIs(t, err, errAddressLiteral)
			default:
				require.NoError(t, err)
				assert.Equal(t, tc.want, d)
				assert.Equal(t, tc.authority, d.String(), "String is the authority again")
			}
		})
	}
}

func TestReasonStatus(t *testing.T) {
	for r, want := range map[Reason]int{
		ReasonBadRequest: http.StatusBadRequest, ReasonAddressLiteral: http.StatusBadRequest,
		ReasonHeaderTooLarge: http.StatusRequestHeaderFieldsTooLarge, ReasonHeaderTimeout: http.StatusRequestTimeout,
		ReasonNotExported: http.StatusForbidden, ReasonPortNotExposed: http.StatusForbidden, ReasonPodNotExported: http.StatusForbidden,
		ReasonNoEndpoint: http.StatusServiceUnavailable, ReasonTooMany: http.StatusServiceUnavailable, ReasonNotSynced: http.StatusServiceUnavailable,
		ReasonDialFailed: http.StatusBadGateway,
	} {
		assert.Equal(t, want, r.status(), string(r))
	}
}

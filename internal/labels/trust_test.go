package labels

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMirrorNameMatches(t *testing.T) {
	mirror := map[string]string{ClusterName: "west", RemoteService: "web"}
	pod := map[string]string{ClusterName: "west", RemoteService: "db", RemoteHostname: "db-0"}
	for _, tc := range []struct {
		name string
		l    map[string]string
		want bool
	}{
		{"web-west", mirror, true},
		{"web-paris", mirror, false},
		{"evil-west", mirror, false},
		{"db-0-west", pod, true},
		{"db-west", pod, false},
		{"web-west", map[string]string{ClusterName: "west"}, false},
		{"-west", map[string]string{ClusterName: "west", RemoteService: ""}, false},
	} {
		assert.Equal(t, tc.want, MirrorNameMatches(tc.name, tc.l), "MirrorNameMatches(%q, %v)", tc.name, tc.l)
	}
}

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
	}{
		{in: "30000-32767", want: PortRange{First: 30000, Last: 32767}},
		{in: "8080", want: PortRange{First: 8080, Last: 8080}},
		{in: " 1 - 2 ", want: PortRange{First: 1, Last: 2}},
	} {
		got, err := ParsePortRange(tc.in)
		assert.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "x", "0-10", "10-5", "1-65536", "a-b"} {
		_, err := ParsePortRange(bad)
		assert.Error(t, err, bad)
	}
}

func TestPortRange(t *testing.T) {
	r := PortRange{First: 30000, Last: 32767}
	assert.Equal(t, "30000-32767", r.String())
	assert.Equal(t, 2768, r.Size())
	assert.False(t, r.IsZero())
	for p, want := range map[int32]bool{29999: false, 30000: true, 32767: true, 32768: false} {
		assert.Equal(t, want, r.Contains(p), "Contains(%d)", p)
	}
	var zero PortRange
	assert.True(t, zero.IsZero() && zero.Contains(1) && zero.Contains(65535) && zero.String() == "", "the zero range contains every port")
}

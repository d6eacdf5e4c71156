package labels

import "testing"

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
		if got := MirrorNameMatches(tc.name, tc.l); got != tc.want {
			t.Errorf("MirrorNameMatches(%q, %v) = %t, want %t", tc.name, tc.l, got, tc.want)
		}
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
		if got, err := ParsePortRange(tc.in); err != nil || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "0-10", "10-5", "1-65536", "a-b"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("ParsePortRange(%q): no error", bad)
		}
	}
}

func TestPortRange(t *testing.T) {
	r := PortRange{First: 30000, Last: 32767}
	if r.String() != "30000-32767" || r.Size() != 2768 || r.IsZero() {
		t.Errorf("%v: String %q, Size %d, IsZero %t", r, r.String(), r.Size(), r.IsZero())
	}
	for p, want := range map[int32]bool{29999: false, 30000: true, 32767: true, 32768: false} {
		if r.Contains(p) != want {
			t.Errorf("Contains(%d) = %t", p, !want)
		}
	}
	var zero PortRange
	if !zero.IsZero() || !zero.Contains(1) || !zero.Contains(65535) || zero.String() != "" {
		t.Error("the zero range contains every port")
	}
}

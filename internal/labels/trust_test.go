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

func TestPortRange(t *testing.T) {
	r, err := ParsePortRange("30000-32767")
	if err != nil || r != (PortRange{30000, 32767}) || r.String() != "30000-32767" {
		t.Fatalf("ParsePortRange = %v, %v", r, err)
	}
	for p, want := range map[int32]bool{29999: false, 30000: true, 32767: true, 32768: false} {
		if r.Contains(p) != want {
			t.Errorf("Contains(%d) = %t", p, !want)
		}
	}
	if one, err := ParsePortRange("8080"); err != nil || one != (PortRange{8080, 8080}) {
		t.Errorf("single port: %v, %v", one, err)
	}
	for _, bad := range []string{"", "x", "0-10", "10-5", "1-65536", "a-b"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("ParsePortRange(%q): no error", bad)
		}
	}
	var zero PortRange
	if !zero.IsZero() || !zero.Contains(1) || !zero.Contains(65535) || zero.String() != "" {
		t.Error("the zero range contains every port")
	}
}

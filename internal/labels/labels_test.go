package labels

import (
	"strings"
	"testing"

	k8slabels "k8s.io/apimachinery/pkg/labels"
)

func TestLinkerdStrings(t *testing.T) {
	// These strings are Linkerd's; a typo here silently breaks
	// compatibility with Linkerd-made mirrors and links.
	for got, want := range map[string]string{
		Exported:              "mirror.linkerd.io/exported",
		MirroredService:       "mirror.linkerd.io/mirrored-service",
		ClusterName:           "mirror.linkerd.io/cluster-name",
		HeadlessMirrorSvcName: "mirror.linkerd.io/headless-mirror-svc-name",
		RemoteResourceVersion: "mirror.linkerd.io/remote-resource-version",
		RemoteSvcFQName:       "mirror.linkerd.io/remote-svc-fq-name",
		LinkSecretType:        "mirror.linkerd.io/remote-kubeconfig",
		LinkSecretKey:         "kubeconfig",
		LinkClusterName:       "multicluster.linkerd.io/cluster-name",
		ExportGateway:         "true",
		ExportFlat:            "remote-discovery",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestDefaultExportSelector(t *testing.T) {
	sel, err := k8slabels.Parse(DefaultExportSelector)
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]bool{"true": true, "remote-discovery": true, "false": false, "": false} {
		set := k8slabels.Set{}
		if value != "" {
			set[Exported] = value
		}
		if got := sel.Matches(set); got != want {
			t.Errorf("selector matches %s=%q: got %t, want %t", Exported, value, got, want)
		}
	}
}

func TestServiceExportSelector(t *testing.T) {
	sel, err := k8slabels.Parse(ServiceExportSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  map[string]string
		want bool
	}{
		{map[string]string{ServiceExportMode: ModeGateway}, true},
		{map[string]string{ServiceExportMode: ModeFlat}, true},
		{map[string]string{ServiceExportMode: "yes"}, false},
		{map[string]string{ServiceExportMode: ModeGateway, MirroredService: MirroredServiceValue}, false},
		{map[string]string{Exported: ExportGateway}, false},
	} {
		if got := sel.Matches(k8slabels.Set(tc.set)); got != tc.want {
			t.Errorf("ServiceExportSelector matches %v: got %t, want %t", tc.set, got, tc.want)
		}
	}
}

func TestExportMode(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   Mode
	}{
		{map[string]string{Exported: "true"}, Gateway},
		{map[string]string{Exported: "remote-discovery"}, Flat},
		{map[string]string{"example.com/export": "yes"}, Gateway},
		{nil, Gateway},
		{map[string]string{ServiceExportMode: ModeFlat}, Flat},
		{map[string]string{ServiceExportMode: ModeGateway}, Gateway},
		// Linkerd's label decides when both are there.
		{map[string]string{Exported: "true", ServiceExportMode: ModeFlat}, Gateway},
		{map[string]string{Exported: "remote-discovery", ServiceExportMode: ModeGateway}, Flat},
	}
	for _, tc := range tests {
		if got := ExportMode(tc.labels); got != tc.want {
			t.Errorf("ExportMode(%v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if Gateway.String() != "true" || Flat.String() != "remote-discovery" || NotExported.String() != "" {
		t.Errorf("Mode.String is not the label value")
	}
}

func TestMirrorNames(t *testing.T) {
	tests := []struct {
		name, cluster string
		want          string
		wantErr       bool
	}{
		{"nginx-svc", "west", "nginx-svc-west", false},
		{"nginx-set-0", "paris", "nginx-set-0-paris", false},
		{strings.Repeat("a", 58), "west", strings.Repeat("a", 58) + "-west", false}, // 63 characters: the limit
		{strings.Repeat("a", 59), "west", "", true},                                 // 64 characters: refused, never truncated
		{"0pod", "west", "", true},                                                  // Service names start with a letter
		{"", "west", "", true},
		{"svc", "", "", true},
	}
	for _, tc := range tests {
		for _, f := range []func(string, string) (string, error){MirrorName, EndpointMirrorName} {
			got, err := f(tc.name, tc.cluster)
			if (err != nil) != tc.wantErr {
				t.Errorf("(%q, %q): err = %v, wantErr %t", tc.name, tc.cluster, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("(%q, %q) = %q, want %q", tc.name, tc.cluster, got, tc.want)
			}
		}
	}
}

func TestSplitMirrorName(t *testing.T) {
	tests := []struct {
		name, cluster, want string
		ok                  bool
	}{
		{"nginx-svc-west", "west", "nginx-svc", true},
		{"nginx-svc-us-west", "us-west", "nginx-svc", true},
		{"nginx-svc-west", "east", "", false},
		{"-west", "west", "", false},
		{"west", "west", "", false},
	}
	for _, tc := range tests {
		got, ok := SplitMirrorName(tc.name, tc.cluster)
		if got != tc.want || ok != tc.ok {
			t.Errorf("SplitMirrorName(%q, %q) = %q, %t; want %q, %t", tc.name, tc.cluster, got, ok, tc.want, tc.ok)
		}
	}
}

func TestValidateClusterName(t *testing.T) {
	for name, ok := range map[string]bool{
		"west":                  true,
		"us-west":               true,
		"1a":                    true,
		"global":                false,
		"West":                  false,
		"a_b":                   false,
		"":                      false,
		strings.Repeat("a", 64): false,
	} {
		if err := ValidateClusterName(name); (err == nil) != ok {
			t.Errorf("ValidateClusterName(%q) = %v, want ok=%t", name, err, ok)
		}
	}
}

package labels

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.Equal(t, want, got)
	}
}

func TestDefaultExportSelector(t *testing.T) {
	sel, err := k8slabels.Parse(DefaultExportSelector)
	require.NoError(t, err)
	for value, want := range map[string]bool{"true": true, "remote-discovery": true, "false": false, "": false} {
		set := k8slabels.Set{}
		if value != "" {
			set[Exported] = value
		}
		assert.Equal(t, want, sel.Matches(set), "selector matches %s=%q", Exported, value)
	}
}

func TestServiceExportSelector(t *testing.T) {
	sel, err := k8slabels.Parse(ServiceExportSelector)
	require.NoError(t, err)
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
		assert.Equal(t, tc.want, sel.Matches(k8slabels.Set(tc.set)), "ServiceExportSelector matches %v", tc.set)
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
		assert.Equal(t, tc.want, ExportMode(tc.labels), "ExportMode(%v)", tc.labels)
	}
	assert.Equal(t, []string{"true", "remote-discovery", ""}, []string{Gateway.String(), Flat.String(), NotExported.String()},
		"Mode.String is the label value")
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
			assert.Equal(t, tc.wantErr, err != nil, "(%q, %q): err = %v", tc.name, tc.cluster, err)
			assert.Equal(t, tc.want, got, "(%q, %q)", tc.name, tc.cluster)
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
		assert.Equal(t, tc.want, got, "SplitMirrorName(%q, %q)", tc.name, tc.cluster)
		assert.Equal(t, tc.ok, ok, "SplitMirrorName(%q, %q)", tc.name, tc.cluster)
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
		err := ValidateClusterName(name)
		assert.Equal(t, ok, err == nil, "ValidateClusterName(%q) = %v", name, err)
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLinkFlag(t *testing.T) {
	dir := t.TempDir()
	withColon := filepath.Join(dir, "a:b.kubeconfig")
	require.NoError(t, os.WriteFile(withColon, nil, 0o600))

	var l linkFlags
	require.NoError(t, l.Set("west=/etc/west.kubeconfig"))
	require.NoError(t, l.Set("paris=/etc/paris.kubeconfig:admin"))
	require.NoError(t, l.Set("tokyo="+withColon))
	assert.Equal(t, linkFlags{
		{Name: "west", Kubeconfig: "/etc/west.kubeconfig"},
		{Name: "paris", Kubeconfig: "/etc/paris.kubeconfig", Context: "admin"},
		{Name: "tokyo", Kubeconfig: withColon},
	}, l)
	for _, bad := range []string{"west=/x", "noequals", "=x", "x=", "Bad_Name=/x", "global=/x"} {
		assert.Error(t, l.Set(bad), bad)
	}
}

// Bad flags are a usage error (exit 2), before anything is contacted.
func TestControllerFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--cluster", "east"},
		{"--cluster", "east", "--egress-address", "127.0.0.1", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"},
		{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "2-1"},
		{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--export-selector", ""},
		{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--link", "east=/x"},
		{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "extra"},
		{"--cluster", "east", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"},
		{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-service", "mcmirror/gw", "--egress-ports", "1-2"},
		{"--cluster", "east", "--egress-service", "gw", "--egress-ports", "1-2"},
		{"--cluster", "east", "--egress-service", "mcmirror/gw/x", "--egress-ports", "1-2"},
		{"--cluster", "east", "--egress-service", "Mcmirror/gw", "--egress-ports", "1-2"},
		{"--cluster", "east", "--egress-service", "mcmirror/", "--egress-ports", "1-2"},
		{"--cluster", "east", "--egress-service", "mcmirror/gw", "--egress-ports", "2-1"},
	} {
		assert.Equal(t, 2, runController(args), "%q", args)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// corefile.example is a whole cluster DNS Corefile whose every directive is
// compiled into coredns-mc. (The mcmirror block's options are checked by the
// plugin's own tests.)
func TestCorefileExampleParses(t *testing.T) {
	data, err := os.ReadFile("../../corefile.example")
	require.NoError(t, err)
	blocks, err := caddyfile.Parse("corefile.example", bytes.NewReader(data), dnsserver.Directives)
	require.NoError(t, err, "corefile.example")
	seen := map[string]bool{}
	for _, b := range blocks {
		for d := range b.Tokens {
			seen[d] = true
		}
	}
	for _, want := range []string{"mcmirror", "kubernetes", "ready"} {
		assert.True(t, seen[want], "corefile.example has no %s block", want)
	}
}

// runMainEnv makes the test binary, started again with it set, run main:
// coredns-mc itself, every plugin and flag of it, without a separate build.
const runMainEnv = "COREDNS_MC_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCorednsMC runs coredns-mc with args and returns its exit code and
// standard error (with standard output when combined). A mistake ends the
// process at once; one still running after 30 seconds is a failure, not a
// wait.
func runCorednsMC(t *testing.T, combined bool, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out bytes.Buffer
	cmd.Stderr = &out
	if combined {
		cmd.Stdout = &out
	}
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "coredns-mc %q kept running:\n%s", args, out.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

// Every Corefile mistake stops coredns-mc at start-up, exit status 1, with
// one line that names the file and the line of the mistake.
func TestCorefileMistakes(t *testing.T) {
	dir := t.TempDir()
	kc, garbage := testKubeconfigs(t, dir)
	missing := filepath.Join(dir, "missing.kubeconfig")

	// Each body goes into the mcmirror block after its "mcmirror ZONE {"
	// (line 1 of the numbering below) and "cluster east" (line 2): the
	// body starts at line 3.
	for _, tc := range []struct {
		name, zone, body string
		line             int
		want             string
	}{
		{"unknown option", "cluster.local", "kubeconfig KC\nttl 5\nfoo bar", 5, "unknown property 'foo'"},
		{"link twice", "cluster.local", "kubeconfig KC\nlink west KC\nlink west KC", 5, `link "west" given twice`},
		{"link named like this cluster", "cluster.local", "kubeconfig KC\nlink east KC", 4, `link "east" has this cluster's name`},
		{"bad export selector", "cluster.local", "kubeconfig KC\nexport_selector in in in", 4, "export_selector: bad selector"},
		{"selector of everything", "cluster.local", "kubeconfig KC\nexport_selector \"\"", 4, `export_selector: "" selects every Service`},
		{"bad link_secrets selector", "cluster.local", "kubeconfig KC\nlink_secrets links a=b=c", 4, "link_secrets: bad selector"},
		{"bad link_secrets namespace", "cluster.local", "kubeconfig KC\nlink_secrets Links", 4, `link_secrets: bad namespace "Links"`},
		{"ttl not a number", "cluster.local", "kubeconfig KC\nttl 5s", 4, `ttl: "5s" is not a number of seconds`},
		{"ttl out of range", "cluster.local", "kubeconfig KC\nttl 86400", 4, "ttl must be in range [0, 3600]: 86400"},
		{"ttl twice", "cluster.local", "kubeconfig KC\nttl 5\nttl 6", 5, "ttl given twice"},
		{"missing link kubeconfig", "cluster.local", "kubeconfig KC\nlink west " + missing, 4, "link west: kubeconfig " + missing + ": stat"},
		{"unreadable link kubeconfig", "cluster.local", "kubeconfig KC\nlink west " + dir, 4, "link west: kubeconfig " + dir + ": read " + dir + ": is a directory"},
		{"garbage link kubeconfig", "cluster.local", "kubeconfig KC\nlink west " + garbage, 4, "link west: kubeconfig " + garbage},
		{"no such context", "cluster.local", "kubeconfig KC\nlink west KC west", 4, `link west: kubeconfig ` + kc + `: no context "west"`},
		{"missing local kubeconfig", "cluster.local", "kubeconfig " + missing, 3, "kubeconfig " + missing + ": stat"},
		{"zone .", ".", "kubeconfig KC", 1, `zone "." is not a cluster domain`},
		{"bad insecure kubeconfig value", "cluster.local", "kubeconfig KC\nlink_secrets links\nallow_insecure_kubeconfig all", 5, `allow_insecure_kubeconfig: unknown value "all"`},
		{"insecure kubeconfig without link_secrets", "cluster.local", "kubeconfig KC\nallow_insecure_kubeconfig exec", 4, "allow_insecure_kubeconfig without link_secrets"},
		{"bad startup_timeout", "cluster.local", "kubeconfig KC\nstartup_timeout 5", 4, "startup_timeout: time: missing unit"},
		{"bad gateway_health", "cluster.local", "kubeconfig KC\ngateway_health gw:9155", 4, `gateway_health: bad URL "gw:9155"`},
		{"two mcmirror blocks", "cluster.local", "kubeconfig KC\n}\nmcmirror cluster.local {\ncluster east\nkubeconfig KC", 5, "this plugin can only be used once per Server Block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.ReplaceAll(tc.body, "KC", kc)
			// The file's first line opens the server block, so line n
			// above is line n+1 of the file.
			corefile := fmt.Sprintf(". {\nmcmirror %s {\ncluster east\n%s\n}\n}\n", tc.zone, body)
			path := filepath.Join(t.TempDir(), "Corefile")
			require.NoError(t, os.WriteFile(path, []byte(corefile), 0o600))
			code, out := runCorednsMC(t, true, "-conf", path, "-dns.port", "0")
			assert.Equal(t, 1, code, "exit status; output:\n%s", out)
			want := fmt.Sprintf("plugin/mcmirror: %s:%d", path, tc.line+1)
			assert.Contains(t, out, want, "names the file and line")
			assert.Contains(t, out, tc.want)
			assert.Equal(t, 1, strings.Count(out, "plugin/mcmirror: "), "one error line:\n%s", out)
		})
	}
}

// testKubeconfigs writes into dir a kubeconfig of a server nothing listens
// on (a mistake must be found before it is dialled) and a file that is no
// kubeconfig at all, and returns their paths.
func testKubeconfigs(t *testing.T, dir string) (kc, garbage string) {
	t.Helper()
	kc = filepath.Join(dir, "east.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["east"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["east"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["east"] = &clientcmdapi.Context{Cluster: "east", AuthInfo: "east"}
	cfg.CurrentContext = "east"
	require.NoError(t, clientcmd.WriteToFile(*cfg, kc))
	garbage = filepath.Join(dir, "garbage.kubeconfig")
	require.NoError(t, os.WriteFile(garbage, []byte("::: ["), 0o600))
	return kc, garbage
}

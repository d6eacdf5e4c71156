package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// repoRoot is the root of this checkout.
func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..")
}

// InstallFromREADME runs the section "Install, step by step" of
// deploy/README.md on the clusters of e, as a user runs it: its shell
// blocks, in order, in one bash, with a kubeconfig whose contexts are named
// as the clusters, the project's kubectl first on PATH, in a directory that
// holds deploy/ and bin/coredns-mc as a checkout does. It returns the
// script and what it printed. Where this machine differs from a user's,
// the difference is the smallest that works:
//   - step 1 (build and push the image) is `make image`, whose archive every
//     real node's containerd has imported: IMAGE names it;
//   - step 4 runs its second block, the node-port one: nothing here hands
//     out load-balancer addresses;
//   - `make build` (step 7) is the coredns-mc binary of CorednsMC.
//
// The clusters must have real nodes and kubeadm's CoreDNS
// (InstallKubeadmDNS), which step 6 patches.
func (e *Env) InstallFromREADME(ctx context.Context) (string, error) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "README.md"))
	if err != nil {
		return "", err
	}
	steps, err := installSteps(string(readme))
	if err != nil {
		return "", err
	}
	certs, err := blocksAfter(string(readme), "### The certificate", "**With openssl.**", 2)
	if err != nil {
		return "", err
	}
	imgs, err := LocalImages()
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "mcmirror-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := e.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	kubectl, err := Binary("kubectl")
	if err != nil {
		return "", err
	}
	mc, err := CorednsMC()
	if err != nil {
		return "", err
	}
	// The user's checkout: deploy/ of this repository, bin/coredns-mc.
	// kubectl first on PATH is the project's.
	for _, l := range [][2]string{
		{filepath.Join(repoRoot(), "deploy"), filepath.Join(work, "deploy")},
		{mc, filepath.Join(work, "bin", "coredns-mc")},
		{kubectl, filepath.Join(work, "path", "kubectl")},
	} {
		if err := os.MkdirAll(filepath.Dir(l[1]), 0o755); err != nil {
			return "", err
		}
		if err := os.Symlink(l[0], l[1]); err != nil {
			return "", err
		}
	}

	var script strings.Builder
	fmt.Fprintf(&script, "set -euo pipefail\nIMAGE=%s\nmake() { [ \"$*\" = build ]; }\n", imgs.CorednsMC)
	for _, n := range []int{2, 3, 4, 5, 6, 7, 8} {
		blocks := steps[n]
		switch n {
		case 3:
			blocks = certs
		case 4:
			if len(blocks) != 2 {
				return "", fmt.Errorf("step 4: want its load-balancer block and its node-port block, have %d blocks", len(blocks))
			}
			blocks = blocks[1:]
		}
		if len(blocks) == 0 {
			return "", fmt.Errorf("step %d has no sh block", n)
		}
		for _, b := range blocks {
			fmt.Fprintf(&script, "echo '### step %d' >&2\n%s\n", n, b)
		}
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Join(work, "path")+":"+os.Getenv("PATH"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	log := fmt.Sprintf("--- script:\n%s\n--- output (%.1fs):\n%s", script.String(), time.Since(start).Seconds(), out)
	return log, err
}

var stepRE = regexp.MustCompile(`(?m)^\*\*(\d+)\. `)

// installSteps returns the sh blocks of each numbered step of the section
// "## Install, step by step".
func installSteps(readme string) (map[int][]string, error) {
	sec, err := section(readme, "## Install, step by step")
	if err != nil {
		return nil, err
	}
	locs := stepRE.FindAllStringSubmatchIndex(sec, -1)
	steps := map[int][]string{}
	for i, l := range locs {
		end := len(sec)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		var n int
		fmt.Sscan(sec[l[2]:l[3]], &n)
		steps[n] = shBlocks(sec[l[0]:end])
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no numbered steps in the Install section")
	}
	return steps, nil
}

// blocksAfter returns the first n sh blocks after marker within section
// heading.
func blocksAfter(readme, heading, marker string, n int) ([]string, error) {
	sec, err := section(readme, heading)
	if err != nil {
		return nil, err
	}
	i := strings.Index(sec, marker)
	if i < 0 {
		return nil, fmt.Errorf("%q: no %q", heading, marker)
	}
	b := shBlocks(sec[i:])
	if len(b) < n {
		return nil, fmt.Errorf("%q after %q: want %d sh blocks, have %d", heading, marker, n, len(b))
	}
	return b[:n], nil
}

// section returns the text from heading to the next heading of the same or
// a higher level.
func section(readme, heading string) (string, error) {
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		return "", fmt.Errorf("no section %q", heading)
	}
	rest := readme[i+1+len(heading):]
	level := strings.Repeat("#", strings.Index(heading, " "))
	re := regexp.MustCompile(`(?m)^#{1,` + fmt.Sprint(len(level)) + `} `)
	if loc := re.FindStringIndex(rest); loc != nil {
		rest = rest[:loc[0]]
	}
	return rest, nil
}

var shRE = regexp.MustCompile("(?ms)^```sh\n(.*?)^```")

func shBlocks(s string) []string {
	var out []string
	for _, m := range shRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

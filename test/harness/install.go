package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// InstallFromREADME runs the section "Install, step by step" of
// deploy/README.md on the clusters of e, as a user runs it: its shell
// blocks, in order, in one bash, in the directory of InstallShell. It
// returns the script and what it printed. Where this machine differs from
// a user's, the difference is the smallest that works:
//   - step 1 (build and push the image) is `make image`, whose archive every
//     real node's containerd has imported: REPO and TAG name it;
//   - step 4 runs its second block, the node-port one: nothing here hands
//     out load-balancer addresses;
//   - `make build` is the coredns-mc binary of CorednsMC.
//
// The clusters must have real nodes and kubeadm's CoreDNS
// (InstallKubeadmDNS), which the chart's hook patches.
func (e *Env) InstallFromREADME(ctx context.Context) (string, error) {
	steps, err := deploySteps()
	if err != nil {
		return "", err
	}
	var script strings.Builder
	for n := 2; n <= 8; n++ {
		blocks := steps[n]
		if n == 4 {
			blocks = blocks[1:]
		}
		if len(blocks) == 0 {
			return "", fmt.Errorf("step %d has no sh block", n)
		}
		for _, b := range blocks {
			fmt.Fprintf(&script, "echo '### step %d' >&2\n%s\n", n, b)
		}
	}
	return e.InstallShell(ctx, script.String())
}

// InstallFromRootREADME runs README.md's Install block (between its
// markers "install") on the clusters of e, as a user pastes it, with
// InstallShellTimed in the directory name. One difference this machine
// forces: nothing here hands out load-balancer addresses, so the block's
// ingress() and the two lines after it, word for word deploy/README.md's
// step 4 load-balancer block, are that step's node-port block instead.
func (e *Env) InstallFromRootREADME(ctx context.Context, name string) (string, []OutputLine, error) {
	block, err := RootREADMEBlock("install")
	if err != nil {
		return "", nil, err
	}
	steps, err := deploySteps()
	if err != nil {
		return "", nil, err
	}
	if n := strings.Count(block, steps[4][0]); n != 1 {
		return "", nil, fmt.Errorf("README.md's install block holds deploy/README.md's step 4 load-balancer block %d times, want once", n)
	}
	return e.InstallShellTimed(ctx, name, strings.Replace(block, steps[4][0], steps[4][1], 1))
}

// READMEBlocks returns the sh blocks of the section heading (say
// "## Uninstalling") of deploy/README.md.
func READMEBlocks(heading string) ([]string, error) {
	readme, err := os.ReadFile(RepoPath("deploy", "README.md"))
	if err != nil {
		return nil, err
	}
	sec, err := section(string(readme), heading)
	if err != nil {
		return nil, err
	}
	b := shBlocks(sec)
	if len(b) == 0 {
		return nil, fmt.Errorf("%q has no sh block", heading)
	}
	return b, nil
}

// RootREADMEBlock returns the sh block of the top-level README.md that
// stands between the lines "<!-- name: ... -->" and "<!-- /name -->".
func RootREADMEBlock(name string) (string, error) {
	readme, err := os.ReadFile(RepoPath("README.md"))
	if err != nil {
		return "", err
	}
	s := string(readme)
	i := strings.Index(s, "\n<!-- "+name+":")
	j := strings.Index(s, "\n<!-- /"+name+" -->")
	if i < 0 || j < i {
		return "", fmt.Errorf("README.md has no block between <!-- %s: ... --> and <!-- /%s -->", name, name)
	}
	b := shBlocks(s[i:j])
	if len(b) != 1 {
		return "", fmt.Errorf("README.md: want one sh block between the markers %q, have %d", name, len(b))
	}
	return b[0], nil
}

// InstallShell runs script with bash -euo pipefail as a user of the README
// does, in one directory kept for the environment's life (the values files
// the install writes are there for a later upgrade or uninstall): it holds
// charts/, deploy/ and bin/coredns-mc as a checkout does, KUBECONFIG has a
// context per cluster named as the cluster, the project's kubectl and helm
// are first on PATH, REPO and TAG name the project's image (LocalImages),
// and `make build` does nothing (the binary is there). It returns the
// script and what it printed.
func (e *Env) InstallShell(ctx context.Context, script string) (string, error) {
	return e.InstallShellIn(ctx, "install", script)
}

// InstallShellIn is InstallShell in the directory name of the
// environment's, made as InstallShell's: a checkout of its own, as a
// second user's (its certificates, values files) would be.
func (e *Env) InstallShellIn(ctx context.Context, name, script string) (string, error) {
	log, _, err := e.InstallShellTimed(ctx, name, script)
	return log, err
}

// OutputLine is a line a script printed, and when: the time since the
// script started.
type OutputLine struct {
	At   time.Duration
	Text string
}

// InstallShellTimed is InstallShellIn, and returns as well each line the
// script printed (stdout and stderr as they came) with the time it came.
func (e *Env) InstallShellTimed(ctx context.Context, name, script string) (string, []OutputLine, error) {
	work, err := e.installDir(name)
	if err != nil {
		return "", nil, err
	}
	imgs, err := LocalImages()
	if err != nil {
		return "", nil, err
	}
	i := strings.LastIndex(imgs.CorednsMC, ":")
	if i < 0 || strings.Contains(imgs.CorednsMC[i:], "/") {
		return "", nil, fmt.Errorf("image %q has no tag", imgs.CorednsMC)
	}
	full := fmt.Sprintf("set -euo pipefail\nREPO=%s\nTAG=%s\nmake() { [ \"$*\" = build ]; }\n%s",
		imgs.CorednsMC[:i], imgs.CorednsMC[i+1:], script)
	cmd := exec.CommandContext(ctx, "bash", "-c", full)
	cmd.Dir = work
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+filepath.Join(work, "kubeconfig"),
		"HELM_CACHE_HOME="+filepath.Join(work, ".helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(work, ".helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(work, ".helm", "data"),
		"PATH="+filepath.Join(work, "path")+":"+os.Getenv("PATH"))
	out := &stampedWriter{start: time.Now()}
	// One writer for both: exec.Cmd then writes to it from one goroutine.
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	log := fmt.Sprintf("--- script:\n%s\n--- output (%.1fs):\n%s", full, time.Since(out.start).Seconds(), out.all.String())
	return log, out.lines(), err
}

// stampedWriter keeps what is written to it, and when each line began.
type stampedWriter struct {
	start time.Time
	all   strings.Builder
	// begun holds, for each line of all, when its first byte came.
	begun []time.Duration
	// mid says the last byte written ended no line.
	mid bool
}

func (w *stampedWriter) Write(p []byte) (int, error) {
	now := time.Since(w.start)
	for _, b := range p {
		if !w.mid {
			w.begun = append(w.begun, now)
		}
		w.mid = b != '\n'
	}
	return w.all.Write(p)
}

func (w *stampedWriter) lines() []OutputLine {
	text := strings.Split(strings.TrimSuffix(w.all.String(), "\n"), "\n")
	var out []OutputLine
	for i, at := range w.begun {
		out = append(out, OutputLine{At: at, Text: text[i]})
	}
	return out
}

// installDir makes, once, the directory name that InstallShellIn runs in.
func (e *Env) installDir(name string) (string, error) {
	work := filepath.Join(e.Dir, name)
	if _, err := os.Stat(filepath.Join(work, "kubeconfig")); err == nil {
		return work, nil
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	kubectl, err := Binary("kubectl")
	if err != nil {
		return "", err
	}
	helm, err := Binary("helm")
	if err != nil {
		return "", err
	}
	mc, err := CorednsMC()
	if err != nil {
		return "", err
	}
	for _, l := range [][2]string{
		{RepoPath("charts"), filepath.Join(work, "charts")},
		{RepoPath("deploy"), filepath.Join(work, "deploy")},
		{mc, filepath.Join(work, "bin", "coredns-mc")},
		{kubectl, filepath.Join(work, "path", "kubectl")},
		{helm, filepath.Join(work, "path", "helm")},
	} {
		if err := os.MkdirAll(filepath.Dir(l[1]), 0o755); err != nil {
			return "", err
		}
		if err := os.Symlink(l[0], l[1]); err != nil && !os.IsExist(err) {
			return "", err
		}
	}
	// The kubeconfig last: its presence says the directory is complete.
	return work, e.WriteKubeconfig(filepath.Join(work, "kubeconfig"))
}

// deploySteps returns the sh blocks of each numbered step of deploy/
// README.md's "Install, step by step", step 4 with its two blocks (the
// load-balancer one, then the node-port one).
func deploySteps() (map[int][]string, error) {
	readme, err := os.ReadFile(RepoPath("deploy", "README.md"))
	if err != nil {
		return nil, err
	}
	steps, err := installSteps(string(readme))
	if err != nil {
		return nil, err
	}
	if len(steps[4]) != 2 {
		return nil, fmt.Errorf("deploy/README.md step 4: want its load-balancer block and its node-port block, have %d blocks", len(steps[4]))
	}
	return steps, nil
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

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/test/harness"
)

func TestMain(m *testing.M) {
	harness.ServeRoleIfAsked() // the demo's pods re-execute this binary
	os.Exit(m.Run())
}

// TestDemo runs the demo as `make demo` does and, while it runs, pastes
// every line it printed after "ready" into a shell, in order: each must
// print what the demo said it prints.
func TestDemo(t *testing.T) { pasteEveryLine(t, run, 5) }

// TestDemoPods is TestDemo for `make demo-pods`: the walkthrough on real
// nodes, whose lines run in east's client pod with kubectl exec.
func TestDemoPods(t *testing.T) { pasteEveryLine(t, runPods, 4) }

// pasteEveryLine runs demo and, once it is ready, pastes each of the at
// least min command lines it printed into a shell.
func pasteEveryLine(t *testing.T, demo func(context.Context, io.Writer, func(string) error) error, min int) {
	var log strings.Builder
	verified := 0
	err := demo(context.Background(), &log, func(printed string) error {
		blocks := commands(printed)
		if len(blocks) < min {
			return fmt.Errorf("%d command lines printed, want at least %d:\n%s", len(blocks), min, printed)
		}
		for _, b := range blocks {
			var stdout, stderr strings.Builder
			cmd := exec.Command("sh", "-c", b.cmd)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("$ %s: %v\n%s%s", b.cmd, err, stdout.String(), stderr.String())
			}
			// The demo printed what the line wrote on both streams.
			want := strings.TrimSpace(kubectlStreamNoise.ReplaceAllString(b.want+"\n", ""))
			if got := strings.TrimSpace(stdout.String()); got != want {
				return fmt.Errorf("$ %s\nprinted:\n%s\ngot:\n%s\n%s", b.cmd, b.want, got, stderr.String())
			}
			if noise := strings.TrimSpace(kubectlStreamNoise.ReplaceAllString(stderr.String(), "")); noise != "" {
				return fmt.Errorf("$ %s: printed on stderr:\n%s", b.cmd, stderr.String())
			}
			verified++
		}
		return nil
	})
	t.Logf("demo output:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d printed lines give the printed output", verified)
}

// kubectlStreamNoise is a line kubectl exec's WebSocket client logs now
// and then when data of a stream arrives after the stream has ended (seen
// on a loaded machine, the command's output whole and its exit status
// 0): kubectl's, not the demo's. Any other stderr fails the line.
var kubectlStreamNoise = regexp.MustCompile(`(?m)^E\d{4} [\d:.]+ +\d+ websocket\.go:\d+\] Unknown stream id \d+, discarding message\n?`)

type block struct{ cmd, want string }

// commands finds the "$ command" lines of the demo's output and, for each,
// the output lines that follow it up to a blank line.
func commands(printed string) []block {
	var out []block
	lines := strings.Split(printed, "\n")
	for i := 0; i < len(lines); i++ {
		cmd, ok := strings.CutPrefix(lines[i], "$ ")
		if !ok {
			continue
		}
		var want []string
		for i+1 < len(lines) && lines[i+1] != "" {
			i++
			want = append(want, lines[i])
		}
		out = append(out, block{cmd: cmd, want: strings.Join(want, "\n")})
	}
	return out
}

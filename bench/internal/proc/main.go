package proc

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/mcmirror/mcmirror/test/harness"
)

// Main calls run and exits with its code after stopping every process Start
// started, calling cleanup (if not nil) and stopping env, which it does at
// once on SIGINT or SIGTERM (exiting with 130), and after code 0 removes the
// harness state in env.Dir, kept otherwise and said so through logf.
func Main(env *harness.Env, logf func(format string, a ...any), cleanup func(), run func() int) {
	stop := func() {
		StopAll()
		if cleanup != nil {
			cleanup()
		}
		env.Stop()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		logf("interrupted; stopping")
		stop()
		os.Exit(130)
	}()
	code := run()
	stop()
	if code == 0 && env.Dir != "" {
		_ = os.RemoveAll(env.Dir)
	} else if env.Dir != "" {
		logf("harness state and logs kept in %s", env.Dir)
	}
	os.Exit(code)
}

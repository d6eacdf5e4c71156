package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Began is when the command started.
var Began = time.Now()

// Logger is a command's log: lines on stderr after its name and the
// seconds since Began, right-aligned in width columns.
func Logger(name string, width int) func(format string, a ...any) {
	return func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %*.1fs: "+format+"\n", append([]any{name, width, time.Since(Began).Seconds()}, a...)...)
	}
}

// Abs makes each of paths that is not empty absolute.
func Abs(paths ...*string) error {
	for _, p := range paths {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
)

// cli is how a subcommand speaks on the command line: name is its words
// after coredns-mc ("link", "certs root"), which start each message.
type cli struct {
	name           string
	stdout, stderr io.Writer
}

// usage reports a mistake in the command line: exit code 2.
func (c *cli) usage(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "coredns-mc %s: "+format+"\n", append([]any{c.name}, a...)...)
	return 2
}

// fail reports a failure: exit code 1.
func (c *cli) fail(err error) int {
	fmt.Fprintf(c.stderr, "coredns-mc %s: %v\n", c.name, err)
	return 1
}

// parseFlags parses args with fs and returns the arguments that are not
// flags: with interleaved, wherever they stand (parseInterleaved); without,
// none is taken. ok false means exit with code: 0 after -h, which prints
// help and the flag list; 2 after a mistake, which is one line.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string, help string, interleaved bool) (rest []string, code int, ok bool) {
	fs.SetOutput(io.Discard)
	var err error
	if interleaved {
		rest, err = parseInterleaved(fs, args)
	} else if err = fs.Parse(args); err == nil && fs.NArg() > 0 {
		return nil, c.usage("unexpected arguments %q", fs.Args()), false
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(c.stderr)
		fmt.Fprintln(c.stderr, help)
		fs.PrintDefaults()
		return nil, 0, false
	case err != nil:
		return nil, c.usage("%v (-h lists the flags)", err), false
	}
	return rest, 0, true
}

// givenFlags are the flags of names set on the command line, as --NAME.
func givenFlags(fs *flag.FlagSet, names ...string) []string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(names, f.Name) {
			set = append(set, "--"+f.Name)
		}
	})
	return set
}

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool { return len(givenFlags(fs, name)) > 0 }

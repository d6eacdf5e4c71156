package main

import "flag"

// parseInterleaved parses args with fs and returns the arguments that are
// not flags, wherever they stand, as kubectl takes them: flags before,
// between and after a list of contexts. After "--" every argument is one
// of the list.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if len(args) > len(left) && args[len(args)-len(left)-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

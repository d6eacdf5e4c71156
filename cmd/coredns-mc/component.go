package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mcmirror/mcmirror/internal/options"

	"k8s.io/client-go/rest"
)

// component is what the long-running subcommands (controller, gateway)
// share: how their flags are parsed and how they fail.
type component struct {
	// name is the subcommand; usage is its -h text, before the flag list.
	name, usage string
}

// exitError is an error that ends a component with its own exit code;
// every other error exits 2, a usage or configuration mistake. Without err,
// the failure has been logged already and is not reported again.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// fail reports err on one line and returns the exit code.
func (c component) fail(err error) int {
	var e exitError
	if !errors.As(err, &e) {
		e = exitError{2, err}
	}
	if e.err != nil {
		fmt.Fprintf(os.Stderr, "coredns-mc %s: %v\n", c.name, e.err)
	}
	return e.code
}

// parse reads args into a component's options with the flags addFlags adds.
// ok is false when the component is not to run: the exit code is then code
// (0 after -h). A mistake is one line; the flag list only when asked for.
func (c component) parse(args []string, addFlags func(*flag.FlagSet)) (code int, ok bool) {
	fs := flag.NewFlagSet("coredns-mc "+c.name, flag.ContinueOnError)
	addFlags(fs)
	cl := cli{name: c.name, stdout: os.Stdout, stderr: os.Stderr}
	_, code, ok = cl.parseFlags(fs, args, c.usage+"\n\nFlags:", false)
	return code, ok
}

// localConfig returns the local cluster's client configuration.
func localConfig(k options.Kube) (*rest.Config, error) {
	cfg, err := k.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("local cluster: %w", err)
	}
	return cfg, nil
}

// serveHTTP serves mux on ln until the returned server is closed.
func serveHTTP(ln net.Listener, mux *http.ServeMux) *http.Server {
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

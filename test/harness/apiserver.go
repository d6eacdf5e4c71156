package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// APIServer returns the cluster's running kube-apiserver process, or nil
// while it is stopped.
func (c *Cluster) APIServer() *Process {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	return c.apiProc
}

// StopAPIServer stops the cluster's kube-apiserver (SIGTERM, then SIGKILL
// after the grace) and returns once it has exited. The stop is deliberate:
// the harness does not count it as a crashed process. etcd keeps the
// cluster's data; StartAPIServer brings the same server back. Stopping a
// stopped server does nothing.
func (c *Cluster) StopAPIServer() {
	c.apiMu.Lock()
	p := c.apiProc
	c.apiProc = nil
	c.apiMu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// StartAPIServer starts the cluster's kube-apiserver again after
// StopAPIServer, with the same address, port, certificates, tokens and etcd
// prefix, so every kubeconfig and ServiceAccount token of the cluster works
// as before, and waits until it is ready. A server that exits while it
// starts (its post-start hooks time out on an overloaded machine) is
// started again, as the kubelet starts a static pod again, until ctx ends;
// only once it serves is it part of the environment, whose every wait
// fails should it exit. Starting a running server does nothing.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.apiMu.Lock()
	running := c.apiProc != nil
	c.apiMu.Unlock()
	if running {
		return nil
	}
	name := c.Name + "/kube-apiserver"
	for {
		p, err := c.env.launch(name, false, nil, c.apiArgv...)
		if err != nil {
			return err
		}
		c.apiMu.Lock()
		c.apiProc = p
		c.apiMu.Unlock()
		err = c.env.poll(ctx, name, func(ctx context.Context) (bool, error) {
			if done, err := p.Exited(); done {
				return false, fmt.Errorf("%w: %v", errExitedStarting, err)
			}
			return c.apiReady(ctx)
		})
		if err == nil {
			c.env.setCritical(p)
			return nil
		}
		if !errors.Is(err, errExitedStarting) || ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "harness: %v; starting it again\n%s\n", err, p.Tail(5))
	}
}

var errExitedStarting = errors.New("exited while starting")

// APIServerOutage stops the cluster's kube-apiserver for the test t and
// returns a function that starts it again (and waits until it is ready),
// failing t if it cannot. Should the test end first, the server is started
// again in its cleanup, so that the next test of the package finds the
// cluster as it was.
func (c *Cluster) APIServerOutage(t testing.TB) (restart func()) {
	t.Helper()
	c.StopAPIServer()
	start := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.StartAPIServer(ctx); err != nil {
			return fmt.Errorf("%s: restart kube-apiserver: %w", c.Name, err)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := start(); err != nil {
			t.Error(err)
		}
	})
	return func() {
		t.Helper()
		if err := start(); err != nil {
			t.Fatal(err)
		}
	}
}

// Package options holds the command-line configuration of mcmirror's
// components, one type each (Controller, Gateway): the flags, their
// defaults and their checks, written once. `coredns-mc controller` and
// `coredns-mc gateway` parse their arguments with them; `coredns-mc check`
// reads a Deployment's arguments with the same flag sets, so that what it
// reasons on is what the component runs with.
//
// Parsing changes nothing in the process (no log level, no budget): what a
// flag sets process-wide is applied by the component when it starts.
package options

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Kube is the local cluster's API server, as both components reach it.
type Kube struct {
	// Kubeconfig is --kubeconfig; empty: the in-cluster config.
	Kubeconfig string
	// Context is --context, a context of Kubeconfig; empty: its current one.
	Context string
}

func (k *Kube) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "kubeconfig of the local cluster (default: in-cluster config)")
	fs.StringVar(&k.Context, "context", k.Context, "context in --kubeconfig (default: its current context)")
}

// RESTConfig returns the local cluster's client configuration.
func (k *Kube) RESTConfig() (*rest.Config, error) {
	if k.Kubeconfig != "" {
		return link.LoadKubeconfig(k.Kubeconfig, k.Context)
	}
	return rest.InClusterConfig()
}

// Verbosity is -v, klog's verbosity. It is kept as given and set by Apply,
// so that reading another process's flags leaves this one's logs alone.
type Verbosity struct {
	level string
}

func (v *Verbosity) addFlag(fs *flag.FlagSet, usage string) {
	fs.Func("v", usage, func(s string) error {
		// klog.Level's own check.
		if _, err := strconv.ParseInt(s, 10, 32); err != nil {
			return err
		}
		v.level = s
		return nil
	})
}

// Apply sets klog's verbosity, if -v was given.
func (v Verbosity) Apply() error {
	if v.level == "" {
		return nil
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs.Set("v", v.level)
}

// exportSelector parses --export-selector, which must select something.
func exportSelector(s string) (k8slabels.Selector, error) {
	sel, err := k8slabels.Parse(s)
	if err != nil || sel.Empty() {
		return nil, fmt.Errorf("--export-selector %q: must select some Services (%v)", s, err)
	}
	return sel, nil
}

// validateCluster checks --cluster.
func validateCluster(name string) error {
	if name == "" {
		return errors.New("--cluster is required")
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return fmt.Errorf("--cluster: %v", err)
	}
	return nil
}

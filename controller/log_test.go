package controller

import (
	"flag"

	"k8s.io/klog/v2"
)

// Tests log only what fails.
func init() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(discard{})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

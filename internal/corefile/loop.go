package corefile

import (
	"bufio"
	"fmt"
	"strings"
)

// ResolvConf is the file the DNS pods read their upstream from when a
// forward names it: the node's resolver configuration, as the kubelet
// gives it to a pod with dnsPolicy Default (CoreDNS's).
const ResolvConf = "/etc/resolv.conf"

// Nameservers returns the addresses of the nameserver lines of a
// resolv.conf.
func Nameservers(resolvConf string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, f[1])
		}
	}
	return out
}

// Loops returns, for each forward of corefile that would send queries back
// to the DNS pod itself, a line that says which and why: an upstream that
// is a loopback address on port 53 (in the pod's own network namespace,
// the pod itself), or the file ResolvConf when resolvConf, its content as
// the DNS pods get it, names a loopback nameserver (a node whose resolver
// is a local stub, such as systemd-resolved's 127.0.0.53). CoreDNS's loop
// plugin stops such a pod at start; without it, every query of such a name
// goes round until it times out. Files other than ResolvConf are not read.
func Loops(corefile, resolvConf string) ([]string, error) {
	blocks, err := parse(corefile)
	if err != nil {
		return nil, fmt.Errorf("the Corefile does not parse: %v", err)
	}
	var loopback []string
	for _, ns := range Nameservers(resolvConf) {
		if ap, err := parseUpstream(ns); err == nil && ap.Addr().IsLoopback() {
			loopback = append(loopback, ns)
		}
	}
	var out []string
	for _, args := range forwards(blocks) {
		for _, a := range args {
			switch {
			case a.Text == ResolvConf && len(loopback) > 0:
				out = append(out, fmt.Sprintf("line %d: forward to %s, whose nameserver %s is the DNS pod itself "+
					"(the node's resolver is local, and a pod with dnsPolicy Default gets the node's %s)",
					a.Line, ResolvConf, strings.Join(loopback, ", "), ResolvConf))
			case strings.HasPrefix(a.Text, "dns://") || !strings.Contains(a.Text, "://"):
				if ap, err := parseUpstream(a.Text); err == nil && ap.Addr().IsLoopback() && ap.Port() == 53 {
					out = append(out, fmt.Sprintf("line %d: forward to %s, the DNS pod itself", a.Line, a.Text))
				}
			}
		}
	}
	return out, nil
}

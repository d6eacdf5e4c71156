package link

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A kubeconfig read from a link Secret is data written by whoever may write
// Secrets in the link namespace, not configuration of the operator. Left as
// is, client-go would run its exec plugins (a command in our pod), call its
// auth-provider, read the files it names (the pod's own ServiceAccount token,
// say, sent to a server of the writer's choosing), speak plain HTTP or skip
// the verification of the server's certificate. Check refuses all of these
// unless the operator allowed them, on the parsed kubeconfig, before any
// client is built: nothing is run, read or sent.

// Reason says why a link Secret was refused. The first five are the
// kubeconfig features Allow can permit, spelt as in the allow options; the
// last three are the Secret's other faults.
type Reason string

// Reasons a link Secret is refused. They are the values of the reason label
// of the refusal metrics.
const (
	// ReasonExec: a user runs a command (exec credential plugin).
	ReasonExec Reason = "exec"
	// ReasonAuthProvider: a user takes its credentials from an
	// auth-provider plugin, which may call a third party.
	ReasonAuthProvider Reason = "auth-provider"
	// ReasonFiles: the kubeconfig names a file to read: tokenFile,
	// client-certificate, client-key or certificate-authority.
	ReasonFiles Reason = "files"
	// ReasonHTTP: the server is not https://, so credentials would go in
	// clear.
	ReasonHTTP Reason = "http"
	// ReasonSkipTLSVerify: insecure-skip-tls-verify, so credentials would
	// go to whoever answers.
	ReasonSkipTLSVerify Reason = "skip-tls-verify"
	// ReasonInvalid: the Secret cannot be used (no kubeconfig key, an
	// unreadable kubeconfig, no usable current context, no cluster name).
	ReasonInvalid Reason = "invalid"
	// ReasonReserved: the Secret names the local cluster or a static link.
	ReasonReserved Reason = "reserved"
	// ReasonDuplicate: another Secret links the same cluster already.
	ReasonDuplicate Reason = "duplicate"
)

// Reasons lists every Reason, for metrics that start each series at zero.
var Reasons = []Reason{ReasonExec, ReasonAuthProvider, ReasonFiles, ReasonHTTP, ReasonSkipTLSVerify,
	ReasonInvalid, ReasonReserved, ReasonDuplicate}

// Allow is what a kubeconfig from a link Secret may use beyond inline
// credentials over verified https. The zero value allows nothing, the
// default. Static links (kubeconfig files named in the configuration) are
// not checked: they are the operator's own.
type Allow struct {
	// Exec allows exec credential plugins: a command run in our pod.
	Exec bool
	// AuthProvider allows auth-provider plugins.
	AuthProvider bool
	// Files allows file paths (tokenFile, client-certificate, client-key,
	// certificate-authority), read from our pod's file system; a relative
	// path is relative to the process's working directory.
	Files bool
	// HTTP allows servers that are not https://.
	HTTP bool
	// SkipTLSVerify allows insecure-skip-tls-verify.
	SkipTLSVerify bool
}

// allowValues are the names Set takes, in the order of the Reasons.
var allowValues = []Reason{ReasonExec, ReasonAuthProvider, ReasonFiles, ReasonHTTP, ReasonSkipTLSVerify}

// AllowValues is the list of the values Set takes, for usage messages:
// "exec, auth-provider, files, http, skip-tls-verify".
func AllowValues() string {
	names := make([]string, len(allowValues))
	for i, v := range allowValues {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// Set allows one feature, by its name: exec, auth-provider, files, http or
// skip-tls-verify.
func (a *Allow) Set(value string) error {
	f := a.flag(Reason(value))
	if f == nil {
		return fmt.Errorf("unknown value %q (want %s)", value, AllowValues())
	}
	*f = true
	return nil
}

// String lists what a allows, comma-separated; "none" when nothing.
func (a Allow) String() string {
	var on []string
	for _, v := range allowValues {
		if a.allows(v) {
			on = append(on, string(v))
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

func (a Allow) allows(r Reason) bool {
	f := a.flag(r)
	return f != nil && *f
}

// flag is the field of a that allows the feature r; nil for a reason
// that is no feature.
func (a *Allow) flag(r Reason) *bool {
	switch r {
	case ReasonExec:
		return &a.Exec
	case ReasonAuthProvider:
		return &a.AuthProvider
	case ReasonFiles:
		return &a.Files
	case ReasonHTTP:
		return &a.HTTP
	case ReasonSkipTLSVerify:
		return &a.SkipTLSVerify
	}
	return nil
}

// RefusedError is a kubeconfig that uses what Allow does not permit. Reason
// is the first fault, in the order of the Reasons; Faults lists them all.
type RefusedError struct {
	Reason Reason
	Faults []string
}

func (e *RefusedError) Error() string {
	return "kubeconfig refused: " + strings.Join(e.Faults, "; ")
}

// Check returns a *RefusedError when an entry of cfg uses something allow
// does not permit, nil otherwise. It looks at every user and cluster of cfg,
// used or not: FromSecret checks a kubeconfig reduced to its current context.
// It only reads cfg.
func Check(cfg *clientcmdapi.Config, allow Allow) error {
	type fault struct {
		reason Reason
		text   string
	}
	var faults []fault
	add := func(r Reason, format string, args ...any) {
		if !allow.allows(r) {
			faults = append(faults, fault{r, fmt.Sprintf(format, args...)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		u := cfg.AuthInfos[name]
		if u == nil {
			continue
		}
		if u.Exec != nil {
			add(ReasonExec, "user %q runs a command (exec %q)", name, u.Exec.Command)
		}
		if u.AuthProvider != nil {
			add(ReasonAuthProvider, "user %q uses auth-provider %q", name, u.AuthProvider.Name)
		}
		for _, f := range []struct{ field, path string }{
			{"tokenFile", u.TokenFile},
			{"client-certificate", u.ClientCertificate},
			{"client-key", u.ClientKey},
		} {
			if f.path != "" {
				add(ReasonFiles, "user %q reads file %q (%s)", name, f.path, f.field)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		c := cfg.Clusters[name]
		if c == nil {
			continue
		}
		if c.CertificateAuthority != "" {
			add(ReasonFiles, "cluster %q reads file %q (certificate-authority)", name, c.CertificateAuthority)
		}
		if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" {
			add(ReasonHTTP, "cluster %q: server %q is not https://", name, redact(c.Server))
		}
		if c.InsecureSkipTLSVerify {
			add(ReasonSkipTLSVerify, "cluster %q sets insecure-skip-tls-verify", name)
		}
	}
	if len(faults) == 0 {
		return nil
	}
	// The reason is the first in the order of the Reasons, whatever the
	// order of the entries.
	slices.SortStableFunc(faults, func(a, b fault) int {
		return slices.Index(Reasons, a.reason) - slices.Index(Reasons, b.reason)
	})
	e := &RefusedError{Reason: faults[0].reason}
	for _, f := range faults {
		e.Faults = append(e.Faults, f.text+" ("+string(f.reason)+" not allowed)")
	}
	return e
}

// redact hides a password in a server URL.
func redact(server string) string {
	if u, err := url.Parse(server); err == nil && u.User != nil {
		return u.Redacted()
	}
	return server
}

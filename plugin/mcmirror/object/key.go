package object

import (
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// GroupKey names a service group: every name made of Service Svc of
// namespace NS, whichever cluster exports it (ServiceKey), or of a local
// federated Service (FederatedKey). The watches queue the key of each
// object that changes; the index rebuilds that group from what they hold,
// reusing the parts whose objects did not change.
type GroupKey struct{ NS, Svc string }

// ServiceKey returns the key of the group of Service ns/svc.
func ServiceKey(ns, svc string) GroupKey { return GroupKey{NS: ns, Svc: svc} }

// fedMark ends the Svc of a federated group's key: no Service name holds a
// dot, so the key of federated Service ns/name is no Service's.
const fedMark = "."

// FederatedKey returns the key of the group of the local federated
// Service ns/name.
func FederatedKey(ns, name string) GroupKey { return GroupKey{NS: ns, Svc: name + fedMark} }

// Federated returns the federated Service's name when k is a federated
// group's key.
func (k GroupKey) Federated() (string, bool) { return strings.CutSuffix(k.Svc, fedMark) }

func (k GroupKey) String() string {
	if name, ok := k.Federated(); ok {
		return k.NS + "/" + name + " (federated)"
	}
	return k.NS + "/" + k.Svc
}

// MirrorGroup returns the group a mirror Service serves: <svc> of
// <svc>-<cluster>, for a Service mirror and for the per-pod mirrors of a
// headless one.
func MirrorGroup(m *Mirror) (GroupKey, bool) {
	if m.Cluster == "" {
		return GroupKey{}, false
	}
	base := m.Name
	if m.HeadlessOf != "" {
		base = m.HeadlessOf
	}
	svc, ok := labels.SplitMirrorName(base, m.Cluster)
	if !ok {
		return GroupKey{}, false
	}
	return ServiceKey(m.Namespace, svc), true
}

// FederatedGroup returns the group a local Service serves when it is a
// federated Service.
func FederatedGroup(m *Mirror) (GroupKey, bool) {
	if m.Fed == nil {
		return GroupKey{}, false
	}
	return FederatedKey(m.Namespace, m.Name), true
}

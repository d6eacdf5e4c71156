package labels

import (
	"fmt"
	"strconv"
	"strings"
)

// What the gateway and the controller check before they believe a mirror
// object: its labels are consistent with its name, and its egress ports are
// in the controller's range. Nothing here proves who wrote an object; that
// is deploy/admission-policy.yaml's job (only the controller's
// ServiceAccount may set, change or remove these keys).

const (
	// ControllerServiceAccount is the user name of the controller's
	// ServiceAccount as deploy/controller.yaml makes it: the only writer
	// of the mirror labels and annotations that deploy/admission-policy.yaml
	// lets through.
	ControllerServiceAccount = "system:serviceaccount:mcmirror:mcmirror-controller"

	// EndpointSliceControllerName is the value of the
	// endpointslice.kubernetes.io/managed-by label on the EndpointSlices that
	// Kubernetes' EndpointSlice controller writes from a Service's selector.
	EndpointSliceControllerName = "endpointslice-controller.k8s.io"
)

// MirrorNameMatches reports whether name is the name the controller gives
// the mirror that labels describe: <remote-service>-<cluster>, or, for a
// per-pod mirror, <remote-hostname>-<cluster>. An object whose name and
// labels disagree was not written by the controller.
func MirrorNameMatches(name string, l map[string]string) bool {
	cluster, svc := l[ClusterName], l[RemoteService]
	if cluster == "" || svc == "" {
		return false
	}
	var want string
	var err error
	if host := l[RemoteHostname]; host != "" {
		want, err = EndpointMirrorName(host, cluster)
	} else {
		want, err = MirrorName(svc, cluster)
	}
	return err == nil && name == want
}

// PortRange is an inclusive range of ports: the controller's
// --egress-ports, which it allocates egress ports from and the gateway is
// given too. The zero range is unset: Contains takes it for every port, as
// the gateway without --egress-ports wants; the controller refuses it.
type PortRange struct {
	First, Last int32
}

// ParsePortRange parses FROM-TO (or a single port).
func ParsePortRange(s string) (PortRange, error) {
	from, to, found := strings.Cut(s, "-")
	if !found {
		to = from
	}
	f, err1 := strconv.ParseInt(strings.TrimSpace(from), 10, 32)
	t, err2 := strconv.ParseInt(strings.TrimSpace(to), 10, 32)
	if err1 != nil || err2 != nil || f < 1 || t > 65535 || f > t {
		return PortRange{}, fmt.Errorf("bad port range %q: want FROM-TO with 1 <= FROM <= TO <= 65535", s)
	}
	return PortRange{First: int32(f), Last: int32(t)}, nil
}

// IsZero reports whether the range is unset.
func (r PortRange) IsZero() bool { return r.First == 0 && r.Last == 0 }

// Size is the number of ports in a set range.
func (r PortRange) Size() int { return int(r.Last-r.First) + 1 }

// Contains reports whether p is in the range; the zero range contains
// every port.
func (r PortRange) Contains(p int32) bool {
	return r.IsZero() || p >= r.First && p <= r.Last
}

func (r PortRange) String() string {
	if r.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

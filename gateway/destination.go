package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Destination is what an egress asks an ingress to reach: a port of an
// exported Service, or of one named pod of an exported headless Service.
// On the wire it is the authority of the CONNECT request:
//
//	<svc>.<ns>:<port>          the Service
//	<host>.<svc>.<ns>:<port>   the pod with that hostname
//
// The port is the Service's port, as the mirror has it; the ingress maps it
// to the endpoints' port. Names, never addresses: the ingress dials only what
// its own cluster says is exported.
type Destination struct {
	Namespace string
	Service   string
	Host      string // empty for the Service
	Port      int32
}

// String returns the CONNECT authority.
func (d Destination) String() string {
	name := d.Service + "." + d.Namespace
	if d.Host != "" {
		name = d.Host + "." + name
	}
	return net.JoinHostPort(name, strconv.Itoa(int(d.Port)))
}

// errAddressLiteral is the refusal of an authority that is an address.
var errAddressLiteral = errors.New("an address literal is not a destination: name an exported Service")

// ParseDestination parses a CONNECT authority.
func ParseDestination(authority string) (Destination, error) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		return Destination{}, fmt.Errorf("destination %q: %w", authority, err)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return Destination{}, errAddressLiteral
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return Destination{}, fmt.Errorf("destination %q: bad port %q", authority, port)
	}
	parts := strings.Split(host, ".")
	var d Destination
	switch len(parts) {
	case 2:
		d = Destination{Service: parts[0], Namespace: parts[1]}
	case 3:
		d = Destination{Host: parts[0], Service: parts[1], Namespace: parts[2]}
	default:
		return Destination{}, fmt.Errorf("destination %q: want <svc>.<ns>:<port> or <host>.<svc>.<ns>:<port>", authority)
	}
	d.Port = int32(p)
	for _, l := range slices.Backward(parts) { // the namespace first
		if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
			return Destination{}, fmt.Errorf("destination %q: %q: %s", authority, l, strings.Join(errs, "; "))
		}
	}
	return d, nil
}

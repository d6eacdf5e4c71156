package gateway

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// TrustFlags are the gateway's flags of what it believes (README.md,
// "Trust"): the controller's egress port range, the selector-less Services
// whose endpoints may be dialled, and the ranges never dialled.
type TrustFlags struct {
	egressPorts  labels.PortRange
	selectorless []string
	deny         []netip.Prefix
}

// RegisterTrustFlags adds --egress-ports, --allow-selectorless and
// --deny-cidr to fs. Each checks its value as it is parsed.
func RegisterTrustFlags(fs *flag.FlagSet) *TrustFlags {
	t := &TrustFlags{}
	fs.Func("egress-ports", "FROM-TO: the controller's --egress-ports; the egress ignores claims on ports outside it (default: any port)", func(s string) error {
		r, err := labels.ParsePortRange(s)
		if err != nil {
			return err
		}
		t.egressPorts = r
		return nil
	})
	fs.Func("allow-selectorless", "NAMESPACE/NAME, NAMESPACE/* or *: selector-less exported Services whose EndpointSlices the ingress dials whoever wrote them (repeatable; default none: only Pods of the Service's namespace listed by the EndpointSlice controller)", func(s string) error {
		if err := ValidateSelectorless(s); err != nil {
			return err
		}
		t.selectorless = append(t.selectorless, s)
		return nil
	})
	fs.Func("deny-cidr", "CIDR the ingress never dials, such as the node, Service and API-server ranges (repeatable)", func(s string) error {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a CIDR such as 10.96.0.0/12: %w", err)
		}
		t.deny = append(t.deny, p.Masked())
		return nil
	})
	return t
}

// ConfigureIngress gives x the endpoint policy of the flags; call it before
// x runs.
func (t *TrustFlags) ConfigureIngress(x *Exports) {
	x.SetPolicy(EndpointPolicy{Selectorless: t.selectorless, Deny: t.deny})
}

// ConfigureEgress gives e the port range of the flags; call it before e
// runs.
func (t *TrustFlags) ConfigureEgress(e *Egress) { e.Trust.Ports = t.egressPorts }

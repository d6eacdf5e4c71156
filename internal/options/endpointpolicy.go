package options

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// EndpointPolicy is the flags of the endpoint policy
// (internal/endpointpolicy) that the gateway's ingress applies to what it
// dials and the controller to what a flat-mode import carries.
type EndpointPolicy struct {
	// AllowSelectorless are the selector-less Services whose endpoints
	// are believed whoever wrote their EndpointSlices.
	AllowSelectorless []string
	// DenyCIDRs are the ranges never believed.
	DenyCIDRs []netip.Prefix
}

// addFlags adds --allow-selectorless and --deny-cidr; believed and never
// say, in the help, what the component does with an endpoint.
func (o *EndpointPolicy) addFlags(fs *flag.FlagSet, believed, never string) {
	fs.Func("allow-selectorless", "NAMESPACE/NAME, NAMESPACE/* or *: selector-less exported Services whose EndpointSlices "+believed+
		" whoever wrote them (repeatable; default none: only Pods of the Service's namespace listed by the EndpointSlice controller)", func(s string) error {
		if err := ValidateSelectorless(s); err != nil {
			return err
		}
		o.AllowSelectorless = append(o.AllowSelectorless, s)
		return nil
	})
	fs.Func("deny-cidr", "CIDR "+never+", such as the node, Service and API-server ranges (repeatable)", func(s string) error {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a CIDR such as 10.96.0.0/12: %w", err)
		}
		o.DenyCIDRs = append(o.DenyCIDRs, p.Masked())
		return nil
	})
}

// ValidateSelectorless checks one --allow-selectorless entry.
func ValidateSelectorless(s string) error {
	if s == "*" {
		return nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return fmt.Errorf("%q: want NAMESPACE/NAME, NAMESPACE/* or *", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("%q: namespace: %s", s, strings.Join(errs, "; "))
	}
	if name == "*" {
		return nil
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return fmt.Errorf("%q: Service name: %s", s, strings.Join(errs, "; "))
	}
	return nil
}

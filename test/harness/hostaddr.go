package harness

import "net/netip"

// HostAddress returns an address of this machine that is not loopback, on
// a veth pair made for it as RunPod makes a pod's (its host end): a
// process of the test may listen there, and an API server may be pointed
// at it, since Endpoints refuse loopback addresses (the API server's proxy
// to a Service, say, then reaches the process). It lives until the
// environment stops.
func (e *Env) HostAddress() (netip.Addr, error) {
	a, err := e.pods.add()
	if err != nil {
		return netip.Addr{}, err
	}
	return a.gw, nil
}

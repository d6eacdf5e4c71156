package indextest

import (
	"net"
	"slices"
)

// Addresses returns the A and AAAA addresses of h (an index.Hit), sorted.
func Addresses(h interface{ Addresses(v6 bool) []byte }) []string {
	out := append(Unpack(h.Addresses(false), net.IPv4len), Unpack(h.Addresses(true), net.IPv6len)...)
	slices.Sort(out)
	return out
}

// Addrs is Addresses of h, and whether there is an h: what a lookup found.
func Addrs[H interface {
	comparable
	Addresses(v6 bool) []byte
}](h H) ([]string, bool) {
	var none H
	if h == none {
		return nil, false
	}
	return Addresses(h), true
}

// Unpack returns the addresses in v, size octets each, in order.
func Unpack(v []byte, size int) []string {
	var out []string
	for i := 0; i < len(v); i += size {
		out = append(out, net.IP(v[i:i+size]).String())
	}
	return out
}

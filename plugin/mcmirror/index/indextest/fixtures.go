package indextest

import (
	"fmt"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// Fixture is east's view of a fleet: east (local), west and paris linked.
//
//	west:  headless nginx-svc (gateway): nginx-set-0, -1 ready, -2 not ready
//	       ClusterIP web (gateway), dual-stack mirror
//	       headless anon (gateway) without hostnames: mirrored as ClusterIP
//	       ClusterIP nomirror (gateway) whose mirror does not exist yet
//	       ClusterIP flat (flat mode): one ready, one not-ready endpoint
//	       headless pub (flat mode) publishing not-ready addresses
//	paris: headless nginx-svc (gateway): nginx-set-0's mirror exists,
//	       nginx-set-1's does not yet
//	east:  headless nginx-svc exported, one pod
func Fixture() *Source {
	f := NewSource("paris", "west")

	f.AddService("west", "default", "nginx-svc", labels.Gateway, nil, HTTPPort)
	f.AddSlice("west", "default", "nginx-svc", []object.Port{HTTPPort},
		EP("nginx-set-0", "10.1.0.10", true),
		EP("nginx-set-1", "10.1.0.11", true),
		EP("nginx-set-2", "10.1.0.12", false))
	f.AddMirror("default", "nginx-svc-west", "west", "", nil, HTTPPort)
	f.AddMirror("default", "nginx-set-0-west", "west", "nginx-svc-west", []string{"10.96.0.10"}, HTTPPort)
	f.AddMirror("default", "nginx-set-1-west", "west", "nginx-svc-west", []string{"10.96.0.11"}, HTTPPort)
	f.AddMirror("default", "nginx-set-2-west", "west", "nginx-svc-west", []string{"10.96.0.12"}, HTTPPort)

	f.AddService("west", "default", "web", labels.Gateway, []string{"10.100.0.1"}, HTTPPort, DNSPort)
	f.AddMirror("default", "web-west", "west", "", []string{"10.96.0.20", "fd00::20"}, HTTPPort, DNSPort)

	f.AddService("west", "default", "anon", labels.Gateway, nil, HTTPPort)
	f.AddSlice("west", "default", "anon", []object.Port{HTTPPort}, EP("", "10.1.0.50", true))
	f.AddMirror("default", "anon-west", "west", "", []string{"10.96.0.30"}, HTTPPort)

	f.AddService("west", "default", "nomirror", labels.Gateway, []string{"10.100.0.2"}, HTTPPort)

	target := object.Port{Name: "http", Protocol: "tcp", Port: 8080}
	f.AddService("west", "default", "flat", labels.Flat, []string{"10.100.0.3"}, HTTPPort)
	f.AddSlice("west", "default", "flat", []object.Port{target}, EP("", "10.1.0.30", true), EP("", "10.1.0.31", false))

	pub := f.AddService("west", "default", "pub", labels.Flat, nil, HTTPPort)
	pub.PublishNotReady = true
	f.AddSlice("west", "default", "pub", []object.Port{target},
		EP("db-0", "10.1.0.40", true), EP("db-1", "10.1.0.41", false), EP("", "10.1.0.42", true))

	f.AddService("paris", "default", "nginx-svc", labels.Gateway, nil, HTTPPort)
	f.AddSlice("paris", "default", "nginx-svc", []object.Port{HTTPPort},
		EP("nginx-set-0", "10.2.0.10", true), EP("nginx-set-1", "10.2.0.11", true))
	f.AddMirror("default", "nginx-svc-paris", "paris", "", nil, HTTPPort)
	f.AddMirror("default", "nginx-set-0-paris", "paris", "nginx-svc-paris", []string{"10.96.1.10"}, HTTPPort)

	f.AddService("east", "default", "nginx-svc", labels.Gateway, nil, HTTPPort)
	f.AddSlice("east", "default", "nginx-svc", []object.Port{HTTPPort}, EP("nginx-set-0", "10.0.0.10", true))
	return f
}

// Pods exports a headless Service big from west and paris, with n
// pods each, and every per-pod mirror.
func Pods(n int) *Source {
	f := NewSource("paris", "west")
	for ci, c := range []string{"west", "paris"} {
		f.AddService(c, "default", "big", labels.Gateway, nil, HTTPPort)
		f.AddMirror("default", "big-"+c, c, "", nil, HTTPPort)
		var eps []object.Endpoint
		for i := range n {
			host := fmt.Sprintf("big-%d", i)
			eps = append(eps, EP(host, fmt.Sprintf("10.%d.%d.%d", ci+1, i/250, i%250+1), true))
			f.AddMirror("default", host+"-"+c, c, "big-"+c, []string{fmt.Sprintf("10.9%d.%d.%d", ci, i/250, i%250+1)}, HTTPPort)
		}
		f.AddSlice(c, "default", "big", []object.Port{HTTPPort}, eps...)
	}
	return f
}

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/mcmirror/mcmirror/bench/internal/proc"
	"github.com/mcmirror/mcmirror/test/harness"
)

// The HAProxy pair: what an operator would build instead of the gateway.
// The egress (east) is a `mode tcp` frontend per destination whose server
// line speaks mutual TLS to the ingress and verifies its chain and its name
// (verifyhost gateway.west: the certificate's CN, as it has no DNS name);
// the ingress (west) terminates mutual TLS, requires a client certificate of
// the same root whose CN is a gateway's, and forwards to the target: one
// ingress port per destination, because routing one port by SNI would make
// HAProxy check the SNI against the certificate's names, which the gateway
// certificates (a SPIFFE URI, no DNS name) cannot satisfy. Same certificates
// and root as the gateways, TLS 1.3 only, AES-128-GCM preferred (as Go's
// TLS does on AES hardware), one thread each (nbthread 1), pinned like the
// gateways.

const haproxyGlobal = `global
    nbthread 1
    maxconn {{.MaxConn}}
    ssl-server-verify required
    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
    ssl-default-bind-options ssl-min-ver TLSv1.3
    ssl-default-server-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
    ssl-default-server-options ssl-min-ver TLSv1.3
    stats socket {{.Sock}} mode 600 level admin

defaults
    mode tcp
    maxconn {{.MaxConn}}
    timeout connect 5s
    timeout client 1h
    timeout server 1h
`

var haproxyEgress = template.Must(template.New("egress").Parse(`# gwbench: HAProxy egress of east
` + haproxyGlobal + `{{range .Routes}}
frontend {{.Name}}
    bind 127.0.0.1:{{.Listen}}
    default_backend {{.Name}}

backend {{.Name}}
    server west 127.0.0.1:{{.Ingress}} ssl crt {{$.Crt}} ca-file {{$.CA}} verify required verifyhost gateway.west
{{end}}`))

var haproxyIngress = template.Must(template.New("ingress").Parse(`# gwbench: HAProxy ingress of west
` + haproxyGlobal + `{{range .Routes}}
frontend {{.Name}}
    bind 127.0.0.1:{{.Ingress}} ssl crt {{$.Crt}} ca-file {{$.CA}} verify required
    tcp-request session reject unless { ssl_c_s_dn(CN) -m beg gateway. }
    default_backend {{.Name}}

backend {{.Name}}
    server target {{.Target}}
{{end}}`))

type haproxyRoute struct {
	Name    string
	Listen  int    // egress frontend port
	Ingress int    // ingress frontend port
	Target  string // pod address
}

type haproxyConf struct {
	Sock, Crt, CA string
	MaxConn       int
	Routes        []haproxyRoute
}

// haproxyMaxConn is HAProxy's maxconn: enough for the idle connections,
// within the file descriptors it may have (two per connection).
func haproxyMaxConn(cfg *config) (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	n := min(20000, (int(min(lim.Max, 1<<20))-500)/2)
	if n < cfg.idle+cfg.conc+100 {
		return 0, fmt.Errorf("HAProxy may open %d file descriptors, too few for %d idle connections (two each): raise the hard limit (ulimit -Hn) or lower -idle", lim.Max, cfg.idle)
	}
	return n, nil
}

// hapPorts are the HAProxy pair's ports, the same for every start.
type hapPorts struct {
	ingress, egress map[int32]int
}

// startHAProxyPair writes both configurations, checks them with
// `haproxy -c`, runs both pinned to the proxy CPU, and waits until a
// connection through each egress frontend works.
func startHAProxyPair(cfg *config, w *world, tag string) (*setup, error) {
	if w.hap == nil {
		w.hap = &hapPorts{ingress: map[int32]int{}, egress: map[int32]int{}}
		var err error
		for _, p := range targetPorts {
			if w.hap.egress[p.port], err = harness.FreeTCPPort(); err != nil {
				return nil, err
			}
			if w.hap.ingress[p.port], err = harness.FreeTCPPort(); err != nil {
				return nil, err
			}
		}
	}
	maxConn, err := haproxyMaxConn(cfg)
	if err != nil {
		return nil, err
	}
	s := &setup{key: "haproxy", name: "HAProxy pair"}
	var routes []haproxyRoute
	for _, p := range targetPorts {
		routes = append(routes, haproxyRoute{Name: p.name, Listen: w.hap.egress[p.port], Ingress: w.hap.ingress[p.port],
			Target: net.JoinHostPort(w.podIP.String(), strconv.Itoa(int(p.port)))})
	}
	for _, side := range []struct {
		name, cert string
		tmpl       *template.Template
	}{{"west", w.pem["west"], haproxyIngress}, {"east", w.pem["east"], haproxyEgress}} {
		conf := haproxyConf{Sock: hapSock(cfg, side.name), Crt: side.cert, CA: w.tls["west"].CA, MaxConn: maxConn, Routes: routes}
		path := filepath.Join(cfg.out, "gw-haproxy-"+side.name+".cfg")
		var text strings.Builder
		if err := side.tmpl.Execute(&text, conf); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(text.String()), 0o666); err != nil {
			return nil, err
		}
		if out, err := exec.Command(cfg.haproxy, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("haproxy -c -f %s: %v: %s", path, err, out)
		}
		p, err := proc.Start("haproxy-"+side.name, filepath.Join(cfg.out, "logs", "gw-haproxy-"+side.name+"."+tag+".log"), nil,
			"taskset", "-c", cfg.proxyCPU, cfg.haproxy, "-db", "-f", path)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	at := func(port int32) string { return "127.0.0.1:" + strconv.Itoa(w.hap.egress[port]) }
	s.sink, s.echo, s.once = at(sinkPort), at(echoPort), at(oncePort)
	if err := waitWorking(s, 30*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	if w.cipherHAP == "" {
		w.cipherHAP = negotiated(w, "127.0.0.1:"+strconv.Itoa(w.hap.ingress[echoPort]), false)
	}
	return s, nil
}

func hapSock(cfg *config, side string) string {
	return filepath.Join(cfg.out, "gw-haproxy-"+side+".sock")
}

// haproxyInfo returns the fields of `show info` on a HAProxy's stats
// socket.
func haproxyInfo(sock string) (map[string]string, error) {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("show info\n")); err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

package check

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/peers"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// DialPeer connects to a peer gateway's ingress and reads its certificate
// chain. The server's certificate arrives before the client's is asked
// for, so check needs none: the handshake's end, a refusal of the missing
// client certificate, does not matter. Nothing is verified here; Evaluate
// does it against the trust root.
func DialPeer(ctx context.Context, addr string) PeerDial {
	d := PeerDial{Addr: addr}
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		d.Err, d.Answered = dialError(err), refused(err)
		return d
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	var chain []*x509.Certificate
	conn := tls.Client(raw, &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Verified by Evaluate (VerifyChain, trust.ClusterOf), which
		// reports what is wrong rather than a handshake error.
		InsecureSkipVerify: true, //nolint:gosec
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
		NextProtos: []string{"http/1.1"},
	})
	err = conn.HandshakeContext(ctx)
	if len(chain) > 0 {
		d.Chain = chain
		return d
	}
	d.Err, d.Answered = "TLS handshake: "+dialError(err), !timeout(err)
	return d
}

func dialError(err error) string {
	if err == nil {
		return "no certificate"
	}
	if timeout(err) {
		return "no answer within the timeout (--timeout)"
	}
	return err.Error()
}

func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// refused tells an answer (nothing listens, a reset) from silence.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// askDNS asks the cluster DNS for the mirror name: at Options.DNSServer,
// or through a port-forward to a kube-dns pod's TCP port 53.
func (c *collector) askDNS(ctx context.Context, f *DNSFacts) {
	server, network := c.o.DNSServer, "udp"
	if server != "" {
		f.Server = server + " (--dns-server)"
	} else {
		addr, pod, errs, stop, err := c.forwardDNS(ctx)
		if err != nil {
			f.ReachErr = err.Error()
			return
		}
		defer stop()
		defer func() {
			if f.Err != "" {
				if e := errs.String(); e != "" {
					f.Err += " (port-forward: " + e + ")"
				}
			}
		}()
		server, network = addr, "tcp"
		f.Server = "pod kube-system/" + pod + " (port-forward to TCP 53)"
	}
	qtype := dns.TypeA
	if f.Query.IPv6 {
		qtype = dns.TypeAAAA
	}
	m := new(dns.Msg)
	m.SetQuestion(f.Query.Name, qtype)
	r, _, err := (&dns.Client{Net: network}).ExchangeContext(ctx, m, server)
	if err == nil && r.Truncated && network == "udp" {
		r, _, err = (&dns.Client{Net: "tcp"}).ExchangeContext(ctx, m, server)
	}
	if err != nil {
		f.Err = dialError(err)
		return
	}
	f.Rcode = dns.RcodeToString[r.Rcode]
	for _, rr := range r.Answer {
		switch a := rr.(type) {
		case *dns.A:
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				f.Answer = append(f.Answer, ip)
			}
		case *dns.AAAA:
			if ip, ok := netip.AddrFromSlice(a.AAAA); ok {
				f.Answer = append(f.Answer, ip)
			}
		}
	}
}

// forwardDNS port-forwards a local port to TCP port 53 of a ready kube-dns
// pod, through the API server and the pod's kubelet, as kubectl
// port-forward does (WebSocket first, SPDY when the server has none).
func (c *collector) forwardDNS(ctx context.Context) (addr, pod string, errs *syncBuffer, stop func(), err error) {
	pods, err := c.client.CoreV1().Pods(DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: DNSPodSelector})
	if err != nil {
		return "", "", nil, nil, fmt.Errorf("list the cluster DNS pods: %s", describe(err))
	}
	var ready []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(&p) {
			ready = append(ready, p.Name)
		}
	}
	if len(ready) == 0 {
		return "", "", nil, nil, fmt.Errorf("no ready pod %s in %s to port-forward to", DNSPodSelector, DNSNamespace)
	}
	slices.Sort(ready)
	pod = ready[0]
	u := c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(DNSNamespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(c.o.Config)
	if err != nil {
		return "", "", nil, nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, c.o.Config); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	pfctx, cancel := context.WithCancel(ctx)
	readyc := make(chan struct{})
	errOut := &syncBuffer{}
	fw, err := portforward.NewOnAddressesWithContext(pfctx, dialer, []string{"127.0.0.1"}, []string{"0:53"}, readyc, io.Discard, errOut)
	if err != nil {
		cancel()
		return "", "", nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	// ForwardPorts closes its listeners as it returns: closing them here
	// too would have client-go log an error to the user.
	stop = func() { cancel(); <-done }
	select {
	case <-readyc:
	case err := <-done:
		cancel()
		return "", "", nil, nil, fmt.Errorf("port-forward to pod %s/%s: %s", DNSNamespace, pod, describe(err))
	case <-ctx.Done():
		stop()
		return "", "", nil, nil, fmt.Errorf("port-forward to pod %s/%s: %s", DNSNamespace, pod, describe(ctx.Err()))
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", "", nil, nil, fmt.Errorf("port-forward to pod %s/%s: no local port", DNSNamespace, pod)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), pod, errOut, stop, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncBuffer collects what the port-forwarder reports from its goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}

// gateway reads the gateway's /readyz, /metrics and /peers through the API
// server's proxy to its metrics Service: what the gateway itself sees, from
// inside the cluster.
func (c *collector) gateway(ctx context.Context, f *GatewayFacts) {
	// unread: nothing of the gateway could be read.
	unread := func(msg string, noPod bool) { f.ProxyErr, f.Unserved, f.PeersErr, f.CertErr = msg, noPod, msg, msg }
	svc, err := c.client.CoreV1().Services(Namespace).Get(ctx, GatewayMetricsService, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		unread("the Service does not exist", true)
		return
	case err != nil:
		unread(describe(err), false)
		return
	}
	port := ""
	if len(svc.Spec.Ports) > 0 {
		port = cmp.Or(svc.Spec.Ports[0].Name, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
		for _, p := range svc.Spec.Ports {
			if p.Name == "metrics" {
				port = p.Name
			}
		}
	}
	get := func(p string) (int, []byte, error) {
		res := c.client.CoreV1().RESTClient().Get().Namespace(Namespace).Resource("services").SubResource("proxy").
			Name(utilnet.JoinSchemeNamePort("http", GatewayMetricsService, port)).Suffix(p).Do(ctx)
		var code int
		res.StatusCode(&code)
		body, err := res.Raw()
		return code, body, err
	}

	code, body, err := get("/readyz")
	if err == nil {
		f.Ready, f.ReadyAnswer = true, strings.TrimSpace(string(body))
	} else if msg, own := apiServerError(body, err); own {
		unread(msg, unserved(msg))
		return
	} else {
		f.ReadyAnswer = fmt.Sprintf("%d %s", code, firstLine(body, err))
	}

	if _, body, err := get("/metrics"); err != nil {
		f.CertErr = "/metrics: " + describe(err)
	} else if t, ok := gaugeValue(body, "coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds"); !ok {
		f.CertErr = "/metrics has no coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds"
	} else {
		f.CertExpiry = time.Unix(int64(t), 0)
	}

	_, body, err = get("/peers")
	if err != nil {
		f.PeersErr = "/peers: " + describe(err)
		return
	}
	states, err := peers.Decode(bytes.NewReader(body))
	if err != nil {
		f.PeersErr = "/peers: " + err.Error()
		return
	}
	f.Peers = states
}

// apiServerError tells an error of the API server's proxy (no endpoint,
// the pod not reached, the request refused), which the API server answers
// with a Status, from an answer of the gateway itself; it returns the
// message.
func apiServerError(body []byte, err error) (string, bool) {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && (st.Kind == "Status" || st.Status == metav1.StatusFailure && st.Code != 0) {
		return st.Message, true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return describe(err), true // no answer, or no answer of the gateway's
	}
	return "", false
}

// unserved tells a proxy error that says no gateway pod serves.
func unserved(msg string) bool {
	return strings.Contains(msg, "no endpoints available") || strings.Contains(msg, "connection refused")
}

func firstLine(body []byte, err error) string {
	s := strings.TrimSpace(string(body))
	if s == "" && err != nil {
		s = err.Error()
	}
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// gaugeValue finds a sample without labels in a Prometheus text
// exposition.
func gaugeValue(body []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		return v, err == nil
	}
	return 0, false
}

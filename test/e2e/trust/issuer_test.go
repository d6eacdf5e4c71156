package trust_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/test/harness"
)

// A cluster's credentials issue only its own identity. Whoever holds
// east's intermediate key (east's cert-manager, east's operators) can sign
// a certificate that names west, and it chains to the fleet's root like
// any other. Every ingress refuses it, even one whose --allow-cluster lets
// west in, and counts it (issuer_mismatch, under east, whose intermediate
// made it); through the same ingresses, in the same test, west's own
// certificate is served: a stream to a pod of east, and the probe. A
// gateway given the forged certificate as its own does not start.
func TestForgedIdentityRefusedByEveryIngress(t *testing.T) {
	env.LogOnFailure(t)
	east, guarded := env.Cluster("east"), env.Cluster("guarded")
	files := env.GatewayTLS(t, "east", "west") // from the package's root ca
	ca := env.GatewayCA(t)
	guardedTLS, err := ca.IssueFiles(t.TempDir(), "guarded", gatewaytest.Options{})
	require.NoError(t, err)
	forged, err := ca.Issue("west", gatewaytest.Options{Issuer: "east"})
	require.NoError(t, err)
	forgedTLS, err := ca.Write(t.TempDir(), "west", forged)
	require.NoError(t, err)

	// A pod of east behind an exported Service, for west's stream.
	ns := env.UniqueNamespace(t, "issuer", east)
	pod := east.RunEchoPods(t, podPort, "web-0")[0]
	exportService(t, east, ns, "web", "web-0", pod.IP.String())

	ingresses := []struct {
		name string
		gw   *harness.Gateway
	}{
		{"east", env.StartGateway(t, east, harness.GatewayOptions{TLS: files["east"], Ingress: true,
			Args: []string{"--allow-cluster", "west", "--allow-selectorless", ns + "/*"}})},
		{"guarded", env.StartGateway(t, guarded, harness.GatewayOptions{TLS: guardedTLS, Ingress: true,
			Args: []string{"--allow-cluster", "west"}})},
	}
	west, err := gateway.LoadCerts(gateway.CertFiles{Cert: files["west"].Cert, Key: files["west"].Key, CA: files["west"].CA})
	require.NoError(t, err)
	forgedPair, err := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
	require.NoError(t, err)
	const gw = "coredns_mcmirror_gateway_"
	mismatch := map[string]string{"peer": "east", "direction": "ingress", "reason": "issuer_mismatch"}
	failures := map[string]string{"direction": "ingress"}

	for _, in := range ingresses {
		t.Run(in.name, func(t *testing.T) {
			// West's own certificate: served. The client checks the
			// ingress's certificate too, by the same rule.
			legit := west.ClientConfig(in.name, nil)
			status, _ := ask(t, in.gw.IngressAddr, legit, "GET "+gateway.ProbePath+" HTTP/1.1\r\nHost: "+in.name+"\r\n\r\n")
			assert.Equal(t, http.StatusOK, status, "west's probe of %s", in.name)
			if in.name == "east" {
				authority := "web." + ns + ":" + strconv.Itoa(servicePort)
				status, r := ask(t, in.gw.IngressAddr, legit, "CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\n\r\n")
				require.Equal(t, http.StatusOK, status, "west's stream to %s", authority)
				got, err := harness.Hello(r)
				require.NoError(t, err)
				assert.Equal(t, "east/web-0", got)
			}

			// The forgery: refused in the handshake, counted.
			before, handshakes := metric(t, in.gw, gw+"refusals_total", mismatch), metric(t, in.gw, gw+"tls_handshake_failures_total", failures)
			err := forgedAsk(in.gw.IngressAddr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{forgedPair}})
			require.ErrorContains(t, err, "bad certificate", "the forged west certificate at %s's ingress", in.name)
			assert.Equal(t, before+1, metric(t, in.gw, gw+"refusals_total", mismatch))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Equal(c, handshakes+1, metric(c, in.gw, gw+"tls_handshake_failures_total", failures))
			}, wait, tick)
			// And west's again, after it: still served.
			status, _ = ask(t, in.gw.IngressAddr, legit, "GET "+gateway.ProbePath+" HTTP/1.1\r\nHost: "+in.name+"\r\n\r\n")
			assert.Equal(t, http.StatusOK, status)
		})
	}

	// As a gateway's own certificate: refused at start-up, saying what is
	// wrong, before anything is contacted.
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"gateway", "--cluster", "west", "--kubeconfig", env.Cluster("west").Kubeconfig,
		"--ingress-address", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, forgedTLS.Args()...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit status: %v\n%s", err, out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "certificates: "+forgedTLS.Cert+": certificate for west issued by east's intermediate")
}

// ask makes a full handshake with the ingress at addr as cfg says, sends
// request and returns the answer's status and the reader of what follows.
func ask(t *testing.T, addr string, cfg *tls.Config, request string) (int, *bufio.Reader) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	require.NoError(t, c.Handshake())
	_, err = io.WriteString(c, request)
	require.NoError(t, err)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	return resp.StatusCode, r
}

// forgedAsk connects with cfg's certificate and sends a CONNECT; it
// returns the error the connection ends with (nil: the ingress answered).
// In TLS 1.3 the client's handshake is over before the server has checked
// its certificate: the refusal arrives on the first read.
func forgedAsk(addr string, cfg *tls.Config) error {
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "CONNECT web.default:80 HTTP/1.1\r\nHost: web.default:80\r\n\r\n"); err != nil {
		return err
	}
	n, err := c.Read(make([]byte, 64))
	if n > 0 {
		return errors.New("the ingress answered")
	}
	return err
}

package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Identity is what a pod's server answers with: "hello from
// <cluster>/<namespace>/<pod>", the body of every HTTP answer and the first
// line of every TCP connection.
func Identity(cluster, ns, pod string) string {
	return fmt.Sprintf("hello from %s/%s/%s", cluster, ns, pod)
}

// ServeRoleIfAsked is the first call of a program that runs pods with the
// harness outside a test binary (the demo): when the harness re-executes
// the program as a pod's server or a pod's client, it plays that role and
// exits; otherwise it returns at once. Env.Run does it for test binaries.
func ServeRoleIfAsked() { runRoleIfAsked() }

// servePod serves every port of MCMIRROR_POD_PORTS (name:port,...): HTTP
// on ports named http or http-*, otherwise a TCP greeting followed by an
// echo of what the client sends.
func servePod() error {
	id := Identity(os.Getenv("MCMIRROR_POD_CLUSTER"), os.Getenv("MCMIRROR_POD_NAMESPACE"), os.Getenv("MCMIRROR_POD_NAME"))
	errc := make(chan error, 1)
	n := 0
	for _, np := range strings.Split(os.Getenv("MCMIRROR_POD_PORTS"), ",") {
		name, port, ok := strings.Cut(np, ":")
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			return err
		}
		n++
		if name == "http" || strings.HasPrefix(name, "http-") {
			fmt.Fprintf(os.Stderr, "pod: %s: HTTP on %s\n", id, l.Addr())
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, id+"\n")
			})}
			go func() { errc <- srv.Serve(l) }()
			continue
		}
		fmt.Fprintf(os.Stderr, "pod: %s: TCP echo on %s\n", id, l.Addr())
		go func() { errc <- serveGreeting(l, id) }()
	}
	if n == 0 {
		select {} // no port: a pod that only runs
	}
	return <-errc
}

func serveGreeting(l net.Listener, id string) error {
	return acceptEach(l, func(conn net.Conn) {
		if _, err := io.WriteString(conn, id+"\n"); err != nil {
			return
		}
		_, _ = io.Copy(conn, conn)
	})
}

// GoFetch runs, in pod ns/name of c, a Go client that resolves target with
// Go's resolver (the pod's resolv.conf) and returns what the server said:
// for http://HOST[:PORT]/PATH the body of a GET, for tcp://HOST:PORT the
// first line, after checking that the stream echoes and closes cleanly.
func (c *Cluster) GoFetch(ctx context.Context, ns, name, target string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	out, err := c.exec(ctx, ns, name, []string{roleEnv + "=fetch", "MCMIRROR_FETCH=" + target}, exe)
	return strings.TrimSpace(out), err
}

// FindPeers runs, in pod ns/name of c, a peer finder as a StatefulSet's
// members use one: it looks up the SRV records of srv (e.g.
// "_http._tcp.nginx-svc-global") with Go's resolver and fetches
// http://TARGET:PORT/ of every record. It returns one line per record,
// "TARGET:PORT ANSWER", in the order of the SRV answer.
func (c *Cluster) FindPeers(ctx context.Context, ns, name, srv string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out, err := c.exec(ctx, ns, name, []string{roleEnv + "=peers", "MCMIRROR_PEERS=" + srv}, exe)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// fetch is the client of GoFetch.
func fetch(target string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if addr, ok := strings.CutPrefix(target, "tcp://"); ok {
		return greetTCP(ctx, addr)
	}
	return get(ctx, target)
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

func greetTCP(ctx context.Context, addr string) (string, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("greeting: %w", err)
	}
	const ping = "ping\n"
	if _, err := io.WriteString(conn, ping); err != nil {
		return "", err
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != ping {
		return "", fmt.Errorf("echo: %q, %v", echo, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		return "", fmt.Errorf("after the half-close: %q, %v", rest, err)
	}
	return strings.TrimSpace(line), nil
}

// findPeers is the client of FindPeers.
func findPeers(srv string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, addrs, err := net.DefaultResolver.LookupSRV(ctx, "", "", srv)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range addrs {
		hp := net.JoinHostPort(strings.TrimSuffix(a.Target, "."), strconv.Itoa(int(a.Port)))
		body, err := get(ctx, "http://"+hp+"/")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("%s %s\n", hp, body)
	}
	return errors.Join(errs...)
}

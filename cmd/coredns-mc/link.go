package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func init() {
	for _, name := range []string{"link", "unlink"} {
		subcommands[name] = func(args []string) int { return runLinkCmd(name, args, os.Stdout, os.Stderr) }
	}
}

const (
	// fieldManager owns, for server-side apply, what link writes.
	fieldManager = "coredns-mc-link"
	// requestTimeout bounds each call to an API server.
	requestTimeout = 30 * time.Second
)

// linkCmd is one run of `coredns-mc link` or `coredns-mc unlink`.
type linkCmd struct {
	cli  // name "link" or "unlink"
	opts grant.Options
	// The target cluster, the one linked to.
	kubeconfig, context string
	// The source cluster, the one that links; neither set: print instead.
	sourceKubeconfig, sourceContext string
	// apiServer is the target's URL written into the link (link only).
	apiServer string
	// tokenTimeout bounds the wait for the token controller (link only).
	tokenTimeout time.Duration
	// fleet is the list of contexts and its flags, when a fleet is
	// linked (link_fleet.go).
	fleet fleetFlags
}

// parse reads the flags of c.name; ok false means exit with code.
func (c *linkCmd) parse(args []string) (code int, ok bool) {
	fs := flag.NewFlagSet("coredns-mc "+c.name, flag.ContinueOnError)
	fs.StringVar(&c.opts.Cluster, "cluster", "", "the name the source cluster gives the target cluster: the suffix of its mirrors (required for one link)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the target cluster, or of every cluster of a list (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.context, "context", "", "context of the target cluster in the kubeconfig (default: its current context)")
	fs.StringVar(&c.opts.Namespace, "namespace", grant.DefaultNamespace, "namespace of the link's ServiceAccount and token in the target cluster")
	fs.StringVar(&c.opts.Source, "source-cluster", "", "the source cluster's own name: each source then gets a token of its own, revoked on its own")
	fs.StringVar(&c.sourceKubeconfig, "source-kubeconfig", "", "kubeconfig of the source cluster: "+map[string]string{
		"link": "apply the link Secret there instead of printing it", "unlink": "delete the link Secret there instead of printing it"}[c.name])
	fs.StringVar(&c.sourceContext, "source-context", "", "context of the source cluster (in --source-kubeconfig, or the default kubeconfig)")
	fs.StringVar(&c.opts.LinkNamespace, "link-namespace", grant.DefaultLinkNamespace, "namespace of the link Secrets in the source cluster (the controller's --link-secrets)")
	if c.name == "link" {
		fs.DurationVar(&c.tokenTimeout, "token-timeout", time.Minute, "how long to wait for the token controller to fill the token Secret")
	}
	c.fleet.addFlags(fs, c.name)
	contexts, code, ok := c.parseFlags(fs, args, usageOf[c.name], true)
	if !ok {
		return code, false
	}
	if len(contexts) > 0 {
		return c.parseFleet(fs, contexts)
	}
	c.apiServer = c.fleet.lastServer()
	if msg := onlyWithList(fs, "cluster-name", "topology", "parallel"); msg != "" {
		return c.usage("%s", msg), false
	}
	switch {
	case c.opts.Cluster == "":
		return c.usage("--cluster is required"), false
	case c.name == "link" && c.tokenTimeout <= 0:
		return c.usage("--token-timeout must be positive"), false
	}
	if err := c.opts.Validate(); err != nil {
		return c.usage("%v", err), false
	}
	if c.apiServer != "" {
		if err := grant.CheckServer(c.apiServer); err != nil {
			return c.usage("--api-server: %v", err), false
		}
	}
	return 0, true
}

var usageOf = map[string]string{
	"link": "usage: coredns-mc link --cluster NAME [--kubeconfig FILE] [--context CTX] [--source-context CTX] [flags]\n" +
		"       coredns-mc link CONTEXT CONTEXT... [--topology mesh|hub=C|A->B,...] [--cluster-name CONTEXT=NAME] [flags]\n\n" +
		"Grants read access to Services and EndpointSlices of the target cluster (--kubeconfig, --context) to a\n" +
		"ServiceAccount of its own, and prints the link Secret for the source cluster (kubectl apply -f -), or\n" +
		"applies it there with --source-kubeconfig or --source-context.\n\n" +
		fleetUsage("link") + "\n\nFlags:",
	"unlink": "usage: coredns-mc unlink --cluster NAME [--kubeconfig FILE] [--context CTX] [--source-context CTX] [flags]\n" +
		"       coredns-mc unlink CONTEXT CONTEXT... [--topology mesh|hub=C|A->B,...] [--cluster-name CONTEXT=NAME] [flags]\n\n" +
		"Removes a link: the link Secrets of the source cluster (with --source-kubeconfig or --source-context;\n" +
		"otherwise prints the Secret for kubectl delete -f -), then the link's token in the target cluster and,\n" +
		"once no other token of it is left, its ServiceAccount, ClusterRole and ClusterRoleBinding.\n\n" +
		fleetUsage("unlink") + "\n\nFlags:",
}

// progress reports a step done, on stderr: stdout is for the Secret.
func (c *linkCmd) progress(format string, a ...any) {
	fmt.Fprintf(c.stderr, format+"\n", a...)
}

// print writes obj to stdout as YAML.
func (c *linkCmd) print(obj runtime.Object) error {
	out, err := grant.YAML(obj)
	if err == nil {
		_, err = c.stdout.Write(out)
	}
	return err
}

func (c *linkCmd) applySource() bool { return c.sourceKubeconfig != "" || c.sourceContext != "" }

// runLinkCmd runs `coredns-mc link` or `coredns-mc unlink`, by name.
func runLinkCmd(name string, args []string, stdout, stderr io.Writer) int {
	c := &linkCmd{cli: cli{name: name, stdout: stdout, stderr: stderr}}
	if code, ok := c.parse(args); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if c.fleet.contexts != nil {
		return c.runFleet(ctx)
	}
	do := c.link
	if c.name == "unlink" {
		do = c.unlink
	}
	if err := do(ctx); err != nil {
		return c.fail(err)
	}
	return 0
}

// link checks everything it can before it changes anything: both clusters
// answer, the caller may do what linking takes, and the source can take the
// link. Then it grants, waits for the token, and prints or applies the link
// Secret.
func (c *linkCmd) link(ctx context.Context) error {
	o := c.opts
	target, source, err := c.clusters()
	if err != nil {
		return err
	}
	ep, err := target.endpoint(c.apiServer)
	if err != nil {
		return err
	}
	if err := target.reach(ctx); err != nil {
		return err
	}
	tg := grant.TargetObjects(o)
	if err := target.may(ctx, "grant the link's access", grant.GrantAccess(o)...); err != nil {
		return err
	}
	if source != nil {
		if err := source.reach(ctx); err != nil {
			return err
		}
		existing, err := source.linkSecrets(ctx, o, true)
		if err != nil {
			return err
		}
		if err := grant.CheckSource(grant.LinkSecret(o, nil), ep.Server, existing); err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
	}

	for _, obj := range []runtime.Object{tg.Namespace, tg.ServiceAccount, tg.ClusterRole, tg.ClusterRoleBinding, tg.Token} {
		if _, err := target.apply(ctx, obj); err != nil {
			return err
		}
	}
	c.progress("%s: applied ServiceAccount %s/%s, allowed to list and watch Services and EndpointSlices (ClusterRole and ClusterRoleBinding %s), and its token Secret %s/%s",
		target, o.Namespace, grant.ServiceAccount, grant.Role, o.Namespace, o.TokenName())
	token, err := target.waitToken(ctx, o.Namespace, o.TokenName(), c.tokenTimeout)
	if err != nil {
		return err
	}
	if err := target.checkToken(ctx, token); err != nil {
		return err
	}
	kc, err := grant.Kubeconfig(o, ep, token)
	if err != nil {
		return err
	}
	secret := grant.LinkSecret(o, kc)
	if source == nil {
		if err := c.print(secret); err != nil {
			return err
		}
		c.progress("printed link Secret %s/%s for cluster %q (%s): apply it in the source cluster with kubectl apply -f -",
			secret.Namespace, secret.Name, o.Cluster, ep.Server)
		return nil
	}
	if _, err := source.apply(ctx, secret); err != nil {
		return err
	}
	c.progress("%s: applied link Secret %s/%s: cluster %q (%s) is linked", source, secret.Namespace, secret.Name, o.Cluster, ep.Server)
	return nil
}

// unlink removes the source's side first, so that the links stop before
// their credentials do; a target that is gone for good does not keep the
// source linked.
func (c *linkCmd) unlink(ctx context.Context) error {
	o := c.opts
	target, source, err := c.clusters()
	if err != nil {
		return err
	}
	if source == nil {
		if err := c.print(grant.LinkSecretRef(o)); err != nil {
			return err
		}
		c.progress("printed link Secret %s/%s: delete it in the source cluster with kubectl delete -f -", o.LinkNamespace, o.LinkSecretName())
	} else if err := c.unlinkSource(ctx, source); err != nil {
		return err
	}

	if err := target.reach(ctx); err != nil {
		return err
	}
	if err := target.may(ctx, "remove the link's access", grant.RevokeAccess(o)...); err != nil {
		return err
	}
	tg := grant.TargetObjects(o)
	if _, err := target.deleteTracked(ctx, tg.Token); err != nil {
		return err
	}
	others, err := target.otherTokens(ctx, o)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		c.progress("%s: deleted token Secret %s/%s; kept ServiceAccount %s/%s and its role: token Secrets %s still use them",
			target, o.Namespace, o.TokenName(), o.Namespace, grant.ServiceAccount, strings.Join(others, ", "))
		return nil
	}
	for _, obj := range []runtime.Object{tg.ClusterRoleBinding, tg.ClusterRole, tg.ServiceAccount} {
		if _, err := target.deleteTracked(ctx, obj); err != nil {
			return err
		}
	}
	c.progress("%s: deleted token Secret %s/%s, ServiceAccount %s/%s, ClusterRole and ClusterRoleBinding %s (namespace %s kept)",
		target, o.Namespace, o.TokenName(), o.Namespace, grant.ServiceAccount, grant.Role, o.Namespace)
	return nil
}

// unlinkSource deletes every link Secret of the source that links the
// cluster: were one left, the source would adopt it.
func (c *linkCmd) unlinkSource(ctx context.Context, source *cluster) error {
	o := c.opts
	if err := source.reach(ctx); err != nil {
		return err
	}
	existing, err := source.linkSecrets(ctx, o, false)
	if err != nil {
		return err
	}
	names := grant.SecretsOf(o.Cluster, existing)
	for _, name := range names {
		err := source.client.CoreV1().Secrets(o.LinkNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: delete link Secret %s/%s: %s", source, o.LinkNamespace, name, grant.Describe(err))
		}
	}
	if len(names) == 0 {
		c.progress("%s: no link Secret for cluster %q in %s", source, o.Cluster, o.LinkNamespace)
	} else {
		c.progress("%s: deleted link Secrets %s/%s: cluster %q is unlinked", source, o.LinkNamespace, strings.Join(names, ", "), o.Cluster)
	}
	return nil
}

// clusters loads the target and, when given, the source; they must be two
// clusters.
func (c *linkCmd) clusters() (target, source *cluster, err error) {
	if target, err = loadCluster("target cluster", c.kubeconfig, c.context, "--kubeconfig", "--context"); err != nil {
		return nil, nil, err
	}
	if !c.applySource() {
		return target, nil, nil
	}
	if source, err = loadCluster("source cluster", c.sourceKubeconfig, c.sourceContext, "--source-kubeconfig", "--source-context"); err != nil {
		return nil, nil, err
	}
	if strings.TrimSuffix(source.config.Host, "/") == strings.TrimSuffix(target.config.Host, "/") {
		return nil, nil, fmt.Errorf("the source and the target are the same API server (%s): a cluster does not link to itself", target.config.Host)
	}
	return target, source, nil
}

// cluster is a cluster as the caller reaches it.
type cluster struct {
	what   string // "target cluster" or "source cluster"
	config *rest.Config
	client kubernetes.Interface
	// dynamic applies the kinds of gvrOf; metadata reads and deletes them
	// by their metadata alone.
	dynamic  dynamic.Interface
	metadata metadata.Interface
}

func (c *cluster) String() string { return c.what + " " + c.config.Host }

// loadCluster reads a kubeconfig as kubectl does: path, or else $KUBECONFIG
// or ~/.kube/config; context, or else its current context. The flags are
// named in the errors.
func loadCluster(what, path, context, pathFlag, contextFlag string) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	where := strings.Join(rules.GetLoadingPrecedence(), ":")
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("%s: %s %s: %v", what, pathFlag, path, err)
		}
		rules.ExplicitPath, where = path, path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: kubeconfig %s: %v", what, where, err)
	}
	switch {
	case context != "" && raw.Contexts[context] == nil:
		names := slices.Sorted(maps.Keys(raw.Contexts))
		for i, n := range names {
			names[i] = strconv.Quote(n)
		}
		return nil, fmt.Errorf("%s: %s %q: no such context in %s (it has %s)", what, contextFlag, context, where, strings.Join(names, ", "))
	case context == "" && raw.CurrentContext == "":
		return nil, fmt.Errorf("%s: kubeconfig %s has no current context: give %s or %s", what, where, pathFlag, contextFlag)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: kubeconfig %s: %v", what, where, err)
	}
	cfg.Timeout = requestTimeout
	c := &cluster{what: what, config: cfg}
	if err := c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

// connect makes c's clients from c.config, anew after a change to it: each
// client keeps the rate limit of the config it was made from.
func (c *cluster) connect() (err error) {
	if c.client, err = kubernetes.NewForConfig(c.config); err == nil {
		if c.dynamic, err = dynamic.NewForConfig(c.config); err == nil {
			c.metadata, err = metadata.NewForConfig(c.config)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %v", c.what, err)
	}
	return nil
}

// reach checks that the API server answers and takes the credentials.
func (c *cluster) reach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	// /api needs an authenticated user, where /version may not.
	if _, err := c.client.Discovery().RESTClient().Get().AbsPath("/api").Do(ctx).Raw(); err != nil {
		return fmt.Errorf("%s: %s", c, grant.Describe(err))
	}
	return nil
}

// may checks, with SelfSubjectAccessReviews, that the caller may do every
// one of what: the refusal names all that is missing before anything is
// changed.
func (c *cluster) may(ctx context.Context, why string, what ...grant.Access) error {
	var denied []string
	for _, a := range what {
		r, err := c.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.Verb, Group: a.Group, Resource: a.Resource, Namespace: a.Namespace,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%s: access review: %s", c, grant.Describe(err))
		}
		if !r.Status.Allowed {
			denied = append(denied, a.String())
		}
	}
	if len(denied) == 0 {
		return nil
	}
	who := "the kubeconfig's user"
	if r, err := c.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil && r.Status.UserInfo.Username != "" {
		who = r.Status.UserInfo.Username
	}
	return fmt.Errorf("%s: forbidden: %s may not %s, which it needs to %s", c, who, strings.Join(denied, ", "), why)
}

// endpoint is where the source reaches the target: server (or the
// kubeconfig's) with the kubeconfig's CA.
func (c *cluster) endpoint(server string) (grant.Endpoint, error) {
	if c.config.Insecure {
		return grant.Endpoint{}, fmt.Errorf("%s: the kubeconfig skips TLS verification (insecure-skip-tls-verify): a link needs the API server's CA; put it in the kubeconfig", c)
	}
	tls := rest.CopyConfig(c.config)
	if err := rest.LoadTLSFiles(tls); err != nil {
		return grant.Endpoint{}, fmt.Errorf("%s: %v", c, err)
	}
	server = cmp.Or(server, c.config.Host)
	if err := grant.CheckServer(server); err != nil {
		return grant.Endpoint{}, fmt.Errorf("%s: %v", c, err)
	}
	return grant.Endpoint{Server: server, CAData: tls.CAData, TLSServerName: tls.ServerName}, nil
}

// apply server-side applies obj, one of the kinds of gvrOf, and returns
// the resourceVersion of the object as applied: the one it had when the
// apply changed nothing.
func (c *cluster) apply(ctx context.Context, obj runtime.Object) (string, error) {
	u, err := grant.Clean(obj)
	if err != nil {
		return "", err
	}
	gvr, ok := gvrOf[u.GetKind()]
	if !ok {
		return "", fmt.Errorf("cannot apply a %T", obj)
	}
	got, err := c.dynamic.Resource(gvr).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return "", fmt.Errorf("%s: apply %s %s: %s", c, u.GetKind(), strings.TrimPrefix(u.GetNamespace()+"/"+u.GetName(), "/"), grant.Describe(err))
	}
	return got.GetResourceVersion(), nil
}

// waitToken waits until the token controller (in kube-controller-manager)
// has written the token into Secret ns/name.
func (c *cluster) waitToken(ctx context.Context, ns, name string, timeout time.Duration) ([]byte, error) {
	var token []byte
	var last error
	// Each read has its own deadline, not the wait's: the last one must
	// not fail for the wait's end and hide why there is no token.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		s, err := c.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		last = nil
		var ok bool
		token, ok = grant.Token(s)
		return ok, nil
	})
	if err == nil {
		return token, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if last != nil {
		return nil, fmt.Errorf("%s: token Secret %s/%s: %s", c, ns, name, grant.Describe(last))
	}
	return nil, fmt.Errorf("%s: no token in Secret %s/%s after %s: the token controller of kube-controller-manager writes it; is it running, with --service-account-private-key-file? (--token-timeout waits longer)",
		c, ns, name, timeout)
}

// checkToken proves the new token reads what a link reads, before anyone
// relies on it.
func (c *cluster) checkToken(ctx context.Context, token []byte) error {
	cfg := rest.AnonymousClientConfig(c.config)
	cfg.BearerToken = string(token)
	client, err := kubernetes.NewForConfig(cfg)
	if err == nil {
		_, err = client.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
	}
	if err == nil {
		_, err = client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{Limit: 1})
	}
	if err != nil {
		return fmt.Errorf("%s: the link's token cannot list Services and EndpointSlices: %s", c, grant.Describe(err))
	}
	return nil
}

// linkSecrets checks that the caller may write the link Secrets of the
// source (or delete them, write false), and lists them. A source that
// takes a link needs their namespace: nothing else would read them.
func (c *cluster) linkSecrets(ctx context.Context, o grant.Options, write bool) ([]corev1.Secret, error) {
	why, verbs := "delete the link Secret", []string{"list", "delete"}
	if write {
		why, verbs = "write the link Secret", []string{"list", "create", "patch"}
	}
	if err := c.may(ctx, why, grant.SourceAccess(o, verbs...)...); err != nil {
		return nil, err
	}
	ns := o.LinkNamespace
	if write {
		switch _, err := c.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%s: no namespace %s: apply deploy/controller.yaml there first, or give --link-namespace", c, ns)
		case err != nil && !apierrors.IsForbidden(err):
			return nil, fmt.Errorf("%s: namespace %s: %s", c, ns, grant.Describe(err))
		}
	}
	list, err := c.client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=" + labels.LinkSecretType})
	if err != nil {
		return nil, fmt.Errorf("%s: list link Secrets in %s: %s", c, ns, grant.Describe(err))
	}
	return list.Items, nil
}

// otherTokens lists the token Secrets of the link's ServiceAccount other
// than o's own.
func (c *cluster) otherTokens(ctx context.Context, o grant.Options) ([]string, error) {
	list, err := c.client.CoreV1().Secrets(o.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeServiceAccountToken)})
	if err != nil {
		return nil, fmt.Errorf("%s: list token Secrets in %s: %s", c, o.Namespace, grant.Describe(err))
	}
	return grant.OtherTokens(o, list.Items), nil
}

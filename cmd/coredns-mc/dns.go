package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcmirror/mcmirror/internal/corefile"
	"github.com/mcmirror/mcmirror/internal/dnspatch"
	"github.com/mcmirror/mcmirror/internal/link"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func init() {
	subcommands["dns"] = func(args []string) int { return runDNS(args, os.Stdout, os.Stderr) }
}

const (
	// dnsFieldManager is who the Deployment's managedFields say wrote the
	// patch.
	dnsFieldManager = "coredns-mc-dns"
	// dnsRequestTimeout bounds each call to the API server.
	dnsRequestTimeout = 30 * time.Second
	// dnsPoll is how often the rollout is read: the hook's Role has get,
	// not watch.
	dnsPoll = time.Second
	// dnsQuiet is the longest the wait goes without a line in the log.
	dnsQuiet = 30 * time.Second
	// dnsWriteAttempts bounds the writes refused because something else
	// wrote the Deployment between our read and our write.
	dnsWriteAttempts = 5
)

var deploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

const dnsUsage = `usage: coredns-mc dns apply --patch-file FILE [--corefile-stanza FILE [--upstream IP,...]] [--deployment NAMESPACE/NAME] [--timeout 10m] [--wait=false] [--kubeconfig FILE] [--context CTX]
       coredns-mc dns revert [--deployment NAMESPACE/NAME] [--timeout 10m] [--wait=false] [--kubeconfig FILE] [--context CTX]

apply patches the cluster's CoreDNS Deployment into coredns-mc with a JSON
patch (RFC 6902, as JSON or YAML: deploy/patches/coredns.yaml), in one write
that also records, the first time, what the patch may change (the pod
template, the strategy, minReadySeconds) in the annotation
` + dnspatch.Annotation + `. Applied again (an upgrade), it applies the
patch to that recorded original. revert puts the original back and removes
the annotation. Then apply waits until as many pods as the Deployment wants
run the new template and are Ready (they serve; the old pods stay until
the new ones are available, which the Deployment's own strategy and
minReadySeconds decide: kubectl rollout status waits for that), revert
until the rollout is complete.

With --corefile-stanza, apply first reads the Corefile the original pod
template runs (the ConfigMap and key its -conf file comes from), adds the
stanza (mcmirror's block) to the server block that answers the cluster
domain, before its kubernetes plugin, keeping every other line, and writes
the result, with the ConfigMap's other keys, to --corefile-configmap, which
the patch points the Deployment at; it refuses a Corefile that would
forward queries back to the DNS pods (a loopback nameserver in
--resolv-conf) unless --upstream replaces that resolv.conf. revert deletes
that ConfigMap once the original runs again; the cluster's own ConfigMap is
never written. Run as Helm hooks; the
ServiceAccount needs get and patch on that Deployment, nothing else.`

// dnsCmd is one run of `coredns-mc dns apply` or `coredns-mc dns revert`.
type dnsCmd struct {
	cli             // name "dns apply" or "dns revert"
	action   string // "apply" or "revert"
	ns, name string
	// patchFile and patch: what apply applies.
	patchFile string
	patch     []dnspatch.Op
	// timeout bounds the whole run; wait false skips the rollout.
	timeout             time.Duration
	wait                bool
	kubeconfig, context string
	deployments         dynamic.ResourceInterface
	// corefile: the Corefile step (--corefile-stanza), and the client of
	// the Deployment's namespace's ConfigMaps it uses.
	corefile corefileStep
	clients  kubernetes.Interface
	// pruneHistory: revert deletes the ReplicaSets of the patched template.
	pruneHistory bool
}

// configMaps is the ConfigMaps of the Deployment's namespace.
func (c *dnsCmd) configMaps() typedcorev1.ConfigMapInterface {
	return c.clients.CoreV1().ConfigMaps(c.ns)
}

func runDNS(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "apply" && args[0] != "revert") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stderr, dnsUsage)
			return 0
		}
		fmt.Fprintln(stderr, "coredns-mc dns: want apply or revert (coredns-mc dns -h)")
		return 2
	}
	c := &dnsCmd{cli: cli{name: "dns " + args[0], stdout: stdout, stderr: stderr}, action: args[0]}
	if code, ok := c.parse(args[1:]); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, fmt.Errorf("timed out: --timeout %s passed", c.timeout))
	defer cancel()
	if err := c.connect(); err != nil {
		return c.fail(err)
	}
	do := c.apply
	if c.action == "revert" {
		do = c.revert
	}
	if err := do(ctx); err != nil {
		return c.fail(err)
	}
	return 0
}

// parse reads the flags, and the patch file; ok false means exit with code.
func (c *dnsCmd) parse(args []string) (code int, ok bool) {
	fs := flag.NewFlagSet("coredns-mc dns "+c.action, flag.ContinueOnError)
	deployment := fs.String("deployment", "kube-system/coredns", "NAMESPACE/NAME of the CoreDNS Deployment")
	var upstream string
	if c.action == "apply" {
		fs.StringVar(&c.patchFile, "patch-file", "", "the JSON patch to apply, as JSON or YAML, e.g. deploy/patches/coredns.yaml (required)")
		fs.StringVar(&c.corefile.stanzaFile, "corefile-stanza", "", "mcmirror's block, to add to the Corefile the Deployment runs, written to --corefile-configmap; without it the patch alone is applied")
		fs.StringVar(&c.corefile.zone, "cluster-domain", "cluster.local", "the zone of the kubernetes plugin: the server block that answers it gets the stanza")
		fs.StringVar(&upstream, "upstream", "", "comma-separated resolvers that replace each forward's resolv.conf in the Corefile (default: keep them)")
		fs.StringVar(&c.corefile.resolvConf, "resolv-conf", corefile.ResolvConf, "the resolv.conf the DNS pods get (dnsPolicy Default: the node's); apply refuses a Corefile that would forward to a loopback nameserver of it; empty: no check")
		fs.StringVar(&c.corefile.configMap, "corefile-configmap", "coredns-mcmirror", "the ConfigMap, in the Deployment's namespace, that apply writes the Corefile to (with --corefile-stanza)")
	} else {
		fs.StringVar(&c.corefile.configMap, "corefile-configmap", "", "the ConfigMap, in the Deployment's namespace, that apply wrote the Corefile to: deleted once the original runs again (default: none)")
		fs.BoolVar(&c.pruneHistory, "prune-history", false, "once the original runs again, delete the Deployment's ReplicaSets of the patched template (they carry the annotation "+dnspatch.Annotation+" and hold no pod): rollout undo cannot bring it back")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "how long the run may take, the wait for the rollout included")
	fs.BoolVar(&c.wait, "wait", true, "wait until the rollout completes; false: return once the Deployment is written")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig (default: the in-cluster config of the pod's ServiceAccount)")
	fs.StringVar(&c.context, "context", "", "context of the kubeconfig (default: its current context; alone: of $KUBECONFIG or ~/.kube/config)")
	if _, code, ok := c.parseFlags(fs, args, dnsUsage+"\n\nFlags of "+c.action+":", false); !ok {
		return code, false
	}
	ns, name, found := strings.Cut(*deployment, "/")
	switch {
	case !found || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0:
		return c.usage("--deployment %q: want NAMESPACE/NAME", *deployment), false
	case c.timeout <= 0:
		return c.usage("--timeout must be positive"), false
	case c.action == "apply" && c.patchFile == "":
		return c.usage("--patch-file is required"), false
	}
	c.ns, c.name = ns, name
	if err := c.parseCorefileFlags(upstream); err != nil {
		return c.usage("%v", err), false
	}
	if c.action == "apply" {
		data, err := os.ReadFile(c.patchFile)
		if err != nil {
			return c.usage("--patch-file: %v", err), false
		}
		if c.patch, err = dnspatch.Parse(data); err != nil {
			return c.usage("--patch-file %s: %v", c.patchFile, err), false
		}
	}
	return 0, true
}

// progress writes a line of the log: what was done, what is awaited.
func (c *dnsCmd) progress(format string, a ...any) {
	fmt.Fprintf(c.stdout, "%s: "+format+"\n", append([]any{c.ref()}, a...)...)
}

// ref names the Deployment.
func (c *dnsCmd) ref() string { return c.ns + "/" + c.name }

// connect makes the client: in-cluster, or from a kubeconfig.
func (c *dnsCmd) connect() error {
	var cfg *rest.Config
	var err error
	switch {
	case c.kubeconfig != "":
		cfg, err = link.LoadKubeconfig(c.kubeconfig, c.context)
	case c.context != "":
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context}).ClientConfig()
	default:
		if cfg, err = rest.InClusterConfig(); err != nil {
			err = fmt.Errorf("%v (outside a pod, give --kubeconfig or --context)", err)
		}
	}
	if err != nil {
		return err
	}
	cfg.Timeout = dnsRequestTimeout
	rest.AddUserAgent(cfg, dnsFieldManager)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Unstructured: a field this binary's API types do not know is read,
	// recorded and put back all the same.
	c.deployments = client.Resource(deploymentsResource).Namespace(c.ns)
	c.clients, err = kubernetes.NewForConfig(cfg)
	return err
}

// apply writes the patch, with the original recorded the first time, and
// waits until every pod of the new template is Ready.
func (c *dnsCmd) apply(ctx context.Context) error {
	written := false
	before, after, err := c.write(ctx, func(u *unstructured.Unstructured, attempt int) (*dnspatch.Plan, error) {
		p, err := dnspatch.Apply(u.Object, c.patch)
		if err != nil {
			return nil, fmt.Errorf("%s: %v; nothing was changed", c.ref(), err)
		}
		patched, err := p.Preview(u.Object)
		if err != nil {
			return nil, c.doesNotApply(p, err)
		}
		if p.Records && dnspatch.SameSpec(mustJSON(u.Object), patched) {
			// Recorded as the original, this would be what revert puts
			// back: a CoreDNS whose Corefile is mcmirror's, left behind.
			return nil, fmt.Errorf("%s already is what %s makes of it, but has no annotation %s (patched by hand, with kubectl patch?): "+
				"dns apply records the CoreDNS it replaces, for dns revert to put back, and would record this one. "+
				"Put the CoreDNS back first (kubectl -n %s rollout undo deployment %s), then apply again; nothing was changed",
				c.ref(), c.patchFile, dnspatch.Annotation, c.ns, c.name)
		}
		if c.corefile.stanza != "" && !written {
			// The Corefile first: once the Deployment points at it, it
			// must be there. Every refusal of both comes before.
			d, err := c.deriveCorefile(ctx, u)
			if err != nil {
				return nil, err
			}
			if err := c.writeCorefile(ctx, d); err != nil {
				return nil, err
			}
			written = true
		}
		switch {
		case attempt > 1:
		case p.Records:
			c.progress("first apply: recording the pod template, strategy and minReadySeconds in annotation %s, in the same write as %s",
				dnspatch.Annotation, c.patchFile)
		default:
			c.progress("annotation %s present (applied before): applying %s to the original it recorded", dnspatch.Annotation, c.patchFile)
		}
		return &p, nil
	})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: no such Deployment: nothing to patch", c.ref())
	}
	if err != nil {
		return err
	}
	c.progress("%s", writtenLine(before, after, "patched with "+c.patchFile+", every test of it held"))
	if err := c.rollout(ctx, func(r dnspatch.Rollout) bool { return r.Serving }); err != nil || !c.wait {
		return err
	}
	c.progress("every pod of the new template is Ready and serves; the old pods stay until the new ones are available "+
		"(Ready for the Deployment's minReadySeconds): kubectl -n %s rollout status deployment %s", c.ns, c.name)
	return nil
}

// revert puts the recorded original back, removes the annotation, and
// waits for the rollout; without the annotation there is nothing to do.
func (c *dnsCmd) revert(ctx context.Context) error {
	before, after, err := c.write(ctx, func(u *unstructured.Unstructured, _ int) (*dnspatch.Plan, error) {
		p, found, err := dnspatch.Revert(u.Object)
		if err != nil {
			return nil, fmt.Errorf("%s: %v; nothing was changed", c.ref(), err)
		}
		if !found {
			return nil, nil
		}
		if _, err := p.Preview(u.Object); err != nil {
			return nil, fmt.Errorf("%s: the original recorded in annotation %s cannot be put back: %v; nothing was changed", c.ref(), dnspatch.Annotation, err)
		}
		return &p, nil
	})
	if apierrors.IsNotFound(err) {
		c.progress("no such Deployment: nothing to revert")
		return c.deleteCorefile(ctx)
	}
	if err != nil {
		return err
	}
	if after == nil {
		c.progress("no annotation %s: dns apply never patched it, or it was reverted already; nothing to do", dnspatch.Annotation)
		return c.cleanUp(ctx, before)
	}
	c.progress("%s", writtenLine(before, after, "restored the pod template, strategy and minReadySeconds recorded in annotation "+dnspatch.Annotation+" and removed it"))
	if err := c.rollout(ctx, func(r dnspatch.Rollout) bool { return r.Done }); err != nil {
		return err
	}
	if !c.wait && (c.corefile.configMap != "" || c.pruneHistory) {
		var left []string
		if c.corefile.configMap != "" {
			left = append(left, "ConfigMap "+c.corefile.configMap)
		}
		if c.pruneHistory {
			left = append(left, "the ReplicaSets of the patched template")
		}
		c.progress("left while the rollout runs: %s; revert again once it has completed to delete them", strings.Join(left, " and "))
		return nil
	}
	// Only now that no pod reads them.
	return c.cleanUp(ctx, after)
}

// doesNotApply says why a planned write would be refused: mostly, a test
// of the patch found the Deployment laid out otherwise than kubeadm lays
// out its CoreDNS.
func (c *dnsCmd) doesNotApply(p dnspatch.Plan, err error) error {
	var oe *dnspatch.OpError
	if !errors.As(err, &oe) {
		return fmt.Errorf("%s: %v", c.ref(), err)
	}
	if oe.Index < p.First || oe.Index >= p.End {
		return fmt.Errorf("%s: the original recorded in annotation %s cannot be put back: %v; the patch changed nothing", c.ref(), dnspatch.Annotation, err)
	}
	where := ""
	if !p.Records {
		where = " (applied to the original recorded in annotation " + dnspatch.Annotation + ")"
	}
	return fmt.Errorf("%s is not laid out as kubeadm lays out its CoreDNS, which %s expects: operation %d of the patch%s: %v. "+
		"The patch changed nothing (deploy/README.md, \"The cluster DNS\", says what it needs)",
		c.ref(), c.patchFile, oe.Index-p.First+1, where, oe)
}

// planFunc plans the write from the Deployment as read; a nil plan: nothing
// to write.
type planFunc func(u *unstructured.Unstructured, attempt int) (*dnspatch.Plan, error)

// write reads the Deployment, plans, and writes the plan in one PATCH. A
// write refused because the Deployment changed since it was read (the
// plan's resourceVersion test) changed nothing: it is read and planned
// again. before is the Deployment as read, after as written, nil when
// there was nothing to write.
func (c *dnsCmd) write(ctx context.Context, plan planFunc) (before, after *unstructured.Unstructured, err error) {
	for attempt := 1; ; attempt++ {
		u, err := c.get(ctx)
		if err != nil {
			return nil, nil, err
		}
		p, err := plan(u, attempt)
		if err != nil || p == nil {
			return u, nil, err
		}
		out, err := c.deployments.Patch(ctx, c.name, types.JSONPatchType, p.Marshal(), metav1.PatchOptions{FieldManager: dnsFieldManager})
		if err == nil {
			return u, out, nil
		}
		if ctx.Err() != nil {
			return nil, nil, c.stopped(ctx, "before the API server answered the write (it may or may not have been applied: run "+c.action+" again)")
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			return nil, nil, c.apiError("patch", err)
		}
		// 422 is also what the API server answers for a patched object
		// that fails validation: only a new resourceVersion says the
		// test of ours failed.
		now, gerr := c.get(ctx)
		if gerr != nil || now.GetResourceVersion() == u.GetResourceVersion() {
			return nil, nil, fmt.Errorf("%s: the API server refused the patch, and nothing was changed: %w", c.ref(), err)
		}
		if attempt == dnsWriteAttempts {
			return nil, nil, fmt.Errorf("%s: something else wrote it between each of %d reads and writes (resourceVersion now %s); nothing was changed",
				c.ref(), attempt, now.GetResourceVersion())
		}
		c.progress("written by something else since it was read (resourceVersion %s, now %s): nothing was changed; reading it again",
			u.GetResourceVersion(), now.GetResourceVersion())
	}
}

// writtenLine says what a write did: the generation moves when the spec changed.
func writtenLine(before, after *unstructured.Unstructured, what string) string {
	if before.GetGeneration() == after.GetGeneration() {
		return fmt.Sprintf("%s: the spec was that already (generation %d): no new rollout", what, after.GetGeneration())
	}
	return fmt.Sprintf("%s: generation %d -> %d", what, before.GetGeneration(), after.GetGeneration())
}

// get reads the Deployment.
func (c *dnsCmd) get(ctx context.Context) (*unstructured.Unstructured, error) {
	u, err := c.deployments.Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return nil, c.stopped(ctx, "before the Deployment could be read")
		}
		return nil, c.apiError("get", err)
	}
	return u, nil
}

// apiError says what a failed call means; the API status stays
// reachable (apierrors.IsNotFound).
func (c *dnsCmd) apiError(verb string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: RBAC refuses to %s it (403): the ServiceAccount needs a Role with the verbs get and patch on deployments (group apps) "+
			"named %s in %s; the API server said: %w", c.ref(), verb, c.name, c.ns, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: %s: the credentials are refused (401 Unauthorized): %w", c.ref(), verb, err)
	}
	return fmt.Errorf("%s: %s: %w", c.ref(), verb, err)
}

// stopped is the error of a run ended by --timeout or a signal.
func (c *dnsCmd) stopped(ctx context.Context, when string) error {
	return fmt.Errorf("%s: %v %s", c.ref(), context.Cause(ctx), when)
}

// rollout waits until the rollout has come as far as enough says (Done,
// or Serving), fails, or ctx ends, with a line of the log whenever where
// it stands changes, and at least every dnsQuiet.
func (c *dnsCmd) rollout(ctx context.Context, enough func(dnspatch.Rollout) bool) error {
	if !c.wait {
		c.progress("not waiting for the rollout (--wait=false)")
		return nil
	}
	start := time.Now()
	last, lastLine := "the Deployment not read yet", time.Time{}
	for {
		u, err := c.deployments.Get(ctx, c.name, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
			return c.stopped(ctx, "before the rollout completed: "+last)
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsNotFound(err):
			return c.apiError("get", err)
		case err != nil:
			// The API server restarting, say: the wait goes on.
			c.progress("reading it failed, trying again: %v", err)
		default:
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				return fmt.Errorf("%s: %v", c.ref(), err)
			}
			r := dnspatch.RolloutOf(&d)
			if r.Failed {
				return fmt.Errorf("%s: the rollout failed: %s", c.ref(), r.Message)
			}
			if r.Message != last || time.Since(lastLine) >= dnsQuiet || enough(r) {
				c.progress("%s (%s)", r.Message, time.Since(start).Round(time.Second))
				last, lastLine = r.Message, time.Now()
			}
			if enough(r) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return c.stopped(ctx, "before the rollout completed: "+last)
		case <-time.After(dnsPoll):
		}
	}
}

// mustJSON is obj, an object the API server sent as JSON, as JSON again.
func mustJSON(obj map[string]any) []byte {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return b
}

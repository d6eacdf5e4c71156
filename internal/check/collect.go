package check

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure a run of the checks.
type Options struct {
	// Client and Config reach the cluster checked.
	Client kubernetes.Interface
	Config *rest.Config
	// DNSServer, when set, is the HOST:PORT where the cluster DNS is
	// asked; otherwise a kube-dns pod's TCP port 53 is port-forwarded.
	DNSServer string
	// GatewayCA, when set, is the gateways' trust root (PEM), and
	// GatewayCAFrom says where it came from; otherwise it is read from the
	// gateway's certificate Secret.
	GatewayCA     []byte
	GatewayCAFrom string
	// Timeout bounds each check's calls and dials, so that one dead
	// endpoint does not hold up the others (default 10 s).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// now is the clock.
func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return 10 * time.Second
}

// Run collects the facts and judges them.
func Run(ctx context.Context, o Options) *Report {
	f := Collect(ctx, o)
	return NewReport(f.Cluster(), f.Server, Evaluate(f))
}

// Collect gathers the facts: first what is installed, then, in parallel and
// each within the timeout, the rest.
func Collect(ctx context.Context, o Options) *Facts {
	now := o.now
	f := &Facts{Server: o.Config.Host, Dials: map[string]PeerDial{}}
	c := &collector{o: o, client: o.Client}

	v, err := c.serverVersion(ctx)
	if err != nil {
		f.APIErr = describe(err)
		f.Now = now()
		return f
	}
	f.Version = "Kubernetes " + v

	f.Install = c.install(ctx)
	ctlCfg, gwCfg, dnsCfg := ParseController(f.Install.Controller.Args), ParseGateway(f.Install.Gateway.Args), ParseCorefile(f.Install.Corefile)

	mirrors, mirrorsErr := c.mirrors(ctx)
	claims := ClaimsOf(mirrors)
	var egressClusters []string
	for _, m := range mirrors {
		if _, ok := claims[m.Namespace+"/"+m.Name]; ok && !slices.Contains(egressClusters, m.Labels[labels.ClusterName]) {
			egressClusters = append(egressClusters, m.Labels[labels.ClusterName])
		}
	}
	slices.Sort(egressClusters)

	f.Links = c.linkSecrets(ctx, f.Install, ctlCfg, dnsCfg, gwCfg)
	f.RBAC = PlanRBAC(f.Install, len(f.Links.Secrets), len(claims))

	f.DNS = DNSFacts{MirrorsErr: mirrorsErr}
	if mirrorsErr == "" {
		f.DNS.Query, f.DNS.HasQuery = PickMirrorQuery(mirrors, dnsCfg.Domain())
	}
	f.Gateway = GatewayFacts{Installed: f.Install.Gateway.Found, Config: gwCfg, GatewayMirrors: egressClusters,
		Service: Namespace + "/" + GatewayMetricsService}
	if !f.Gateway.Installed {
		f.Gateway.NotInstalled = fmt.Sprintf("no gateway (Deployment %s/%s): flat mode, or not linked", Namespace, GatewayName)
		if f.Install.Gateway.Err != "" {
			f.Gateway.NotInstalled = "could not read the gateway's Deployment: " + f.Install.Gateway.Err
		}
		if len(claims) > 0 {
			f.Gateway.Required = fmt.Sprintf("%d mirror Services point at its egress", len(claims))
		}
	}
	f.Egress = EgressFacts{Controller: f.Install.Controller.Found, Gateway: f.Install.Gateway.Found,
		ControllerCfg: ctlCfg, GatewayCfg: gwCfg, GatewayHostNetwork: f.Install.Gateway.HostNetwork, Claims: claims, ClaimsErr: mirrorsErr}
	f.Lease = LeaseFacts{Controller: f.Install.Controller.Found, Cfg: ctlCfg, Replicas: f.Install.Controller.Replicas}

	var mu sync.Mutex // guards f.Dials
	run, wait := c.sideBySide(ctx)
	for i := range f.RBAC {
		if f.RBAC[i].Installed {
			run(func(ctx context.Context) { c.review(ctx, &f.RBAC[i]) })
		}
	}
	if f.DNS.HasQuery {
		run(func(ctx context.Context) { c.askDNS(ctx, &f.DNS) })
	}
	policy := linkPolicy(f.Install, ctlCfg, dnsCfg)
	for i := range f.Links.Secrets {
		run(func(ctx context.Context) { c.probeLink(ctx, &f.Links.Secrets[i], &c.secrets[i], policy) })
	}
	if f.Gateway.Installed {
		run(func(ctx context.Context) { c.gateway(ctx, &f.Gateway) })
		run(func(ctx context.Context) { c.trustRoot(ctx, &f.Gateway, f.Install.Gateway) })
		for _, p := range gwCfg.PeerOrder {
			run(func(ctx context.Context) {
				d := DialPeer(ctx, gwCfg.Peers[p])
				mu.Lock()
				f.Dials[p] = d
				mu.Unlock()
			})
		}
	}
	if f.Lease.Controller && ctlCfg.LeaderElect {
		run(func(ctx context.Context) { c.lease(ctx, &f.Lease) })
	}
	if f.Egress.Controller || f.Egress.Gateway {
		run(func(ctx context.Context) { c.nodePorts(ctx, &f.Egress) })
	}
	wait()
	f.Now = now()
	return f
}

// collector makes the API calls of one run.
type collector struct {
	o      Options
	client kubernetes.Interface
	// secrets are the link Secrets as listed, in the order of
	// Facts.Links.Secrets.
	secrets []corev1.Secret
}

// sideBySide returns run, which starts a job beside the others, each
// within the timeout, and wait, which returns once every job has.
func (c *collector) sideBySide(ctx context.Context) (run func(job func(context.Context)), wait func()) {
	var wg sync.WaitGroup
	run = func(job func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
			defer cancel()
			job(ctx)
		}()
	}
	return run, wg.Wait
}

// describe says what an error of an API call means, on one line:
// grant.Describe's, or that the call ran out of check's --timeout.
func describe(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within the timeout (--timeout)"
	}
	return grant.Describe(err)
}

func (c *collector) serverVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	// /api needs an authenticated user, where /version may not.
	if _, err := c.client.Discovery().RESTClient().Get().AbsPath("/api").Do(ctx).Raw(); err != nil {
		return "", err
	}
	raw, err := c.client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var info version.Info
	if err := json.Unmarshal(raw, &info); err != nil {
		return "", err
	}
	return info.GitVersion, nil
}

// install reads the Deployments, the DNS's Corefile and the link
// ServiceAccount.
func (c *collector) install(ctx context.Context) Install {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	var in Install
	in.Controller = c.workload(ctx, Namespace, ControllerName)
	in.Gateway = c.workload(ctx, Namespace, GatewayName)
	in.DNS = c.workload(ctx, DNSNamespace, DNSName)
	if in.DNS.Found {
		cm, key, ok := corefileSource(in.DNS)
		if !ok {
			in.CorefileErr = "no ConfigMap volume mounted where its -conf file is"
		} else {
			in.CorefileFrom = fmt.Sprintf("ConfigMap %s/%s, key %s", in.DNS.Namespace, cm, key)
			if got, err := c.client.CoreV1().ConfigMaps(in.DNS.Namespace).Get(ctx, cm, metav1.GetOptions{}); err != nil {
				in.CorefileErr = in.CorefileFrom + ": " + describe(err)
			} else {
				in.Corefile = got.Data[key]
			}
		}
	}
	_, err := c.client.CoreV1().ServiceAccounts(Namespace).Get(ctx, LinkServiceAccount, metav1.GetOptions{})
	switch {
	case err == nil:
		in.LinkServiceAccount = true
	case !apierrors.IsNotFound(err):
		in.LinkServiceAccountErr = describe(err)
	}
	return in
}

func (c *collector) workload(ctx context.Context, ns, name string) Workload {
	d, err := c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Workload{Namespace: ns, Name: name}
	case err != nil:
		return Workload{Namespace: ns, Name: name, Err: describe(err)}
	}
	return WorkloadOf(d)
}

// corefileSource finds the ConfigMap and key of the DNS's -conf file.
func corefileSource(w Workload) (cm, key string, ok bool) {
	conf, given := lastFlag(w.Args, "conf")
	if !given {
		conf = "/etc/coredns/Corefile"
	}
	v, file, found := w.mounted(conf)
	if !found || v.ConfigMap == nil {
		return "", "", false
	}
	return v.ConfigMap.Name, projectedKey(file, v.ConfigMap.Items), true
}

// mirrors lists the controller's mirror Services in every namespace.
func (c *collector) mirrors(ctx context.Context) ([]corev1.Service, string) {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	list, err := c.client.CoreV1().Services("").List(ctx, metav1.ListOptions{
		LabelSelector: labels.MirrorSelector + "," + labels.ManagedBy + "=" + labels.ManagedByValue})
	if err != nil {
		return nil, describe(err)
	}
	return list.Items, ""
}

// linkSecrets lists and reads the link Secrets; probeLink tries each.
func (c *collector) linkSecrets(ctx context.Context, in Install, ctl ControllerConfig, dns DNSConfig, gw GatewayConfig) LinkFacts {
	f := LinkFacts{Namespace: DefaultLinkNamespace}
	if in.Gateway.Found {
		f.Peers = gw.PeerOrder
	}
	switch {
	case in.Controller.Found && ctl.LinkSecretsNamespace() != "":
		f.Namespace, f.Configured = ctl.LinkSecretsNamespace(), true
	case dns.Mcmirror && dns.LinkNamespace != "":
		f.Namespace, f.Configured = dns.LinkNamespace, true
	}
	switch {
	case in.Controller.Found:
		f.Local = ctl.Cluster
	case in.Gateway.Found:
		f.Local = gw.Cluster
	default:
		f.Local = dns.Cluster
	}
	if !f.Configured && len(f.Peers) == 0 {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout())
	defer cancel()
	list, err := c.client.CoreV1().Secrets(f.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=" + labels.LinkSecretType})
	if err != nil {
		f.Err = describe(err)
		return f
	}
	items := list.Items
	// Oldest first: the order in which the watchers first saw them.
	slices.SortStableFunc(items, func(a, b corev1.Secret) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for _, s := range items {
		ls := LinkSecret{Name: s.Name}
		ls.Cluster, _ = link.ClusterNameOf(&s)
		f.Secrets = append(f.Secrets, ls)
	}
	c.secrets = items
	return f
}

// linkPolicy is what every reader of the link Secrets allows: a Secret
// must pass the controller's and the DNS's policies alike.
func linkPolicy(in Install, ctl ControllerConfig, dns DNSConfig) link.Allow {
	var readers []link.Allow
	if in.Controller.Found && ctl.LinkSecretsNamespace() != "" {
		readers = append(readers, ctl.AllowInsecureKubeconfig)
	}
	if dns.Mcmirror && dns.LinkNamespace != "" {
		readers = append(readers, dns.Allow)
	}
	if len(readers) == 0 {
		return link.Allow{}
	}
	a := readers[0]
	for _, r := range readers[1:] {
		a = link.Allow{Exec: a.Exec && r.Exec, AuthProvider: a.AuthProvider && r.AuthProvider, Files: a.Files && r.Files,
			HTTP: a.HTTP && r.HTTP, SkipTLSVerify: a.SkipTLSVerify && r.SkipTLSVerify}
	}
	return a
}

// probeLink judges a link Secret by internal/link's policy, then tries its
// credentials: a list of Services and of EndpointSlices (limit 1), and
// reviews of the watches. It never runs a command, calls an auth-provider
// or reads a file that a Secret names, whatever the policy allows.
func (c *collector) probeLink(ctx context.Context, ls *LinkSecret, s *corev1.Secret, policy link.Allow) {
	if _, _, err := link.FromSecret(s, policy); err != nil {
		ls.Refused, ls.Reason = trimSecretPrefix(err), link.ReasonOf(err)
		return
	}
	name, cfg, err := link.FromSecret(s, link.Allow{HTTP: policy.HTTP, SkipTLSVerify: policy.SkipTLSVerify})
	if err != nil {
		ls.NotProbed = "its kubeconfig runs a command, calls an auth-provider or reads files, which check never does on this machine"
		ls.Server = cmp.Or(grant.ServerOf(s.Data[labels.LinkSecretKey]), "its API server")
		return
	}
	ls.Cluster, ls.Server = name, cfg.Host
	cfg.Timeout = c.o.timeout()
	client, err := kubernetes.NewForConfig(cfg)
	if err == nil {
		_, err = client.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
	}
	if err == nil {
		_, err = client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{Limit: 1})
	}
	if err != nil {
		ls.ProbeErr, ls.ProbeReason = describe(err), link.FailureReason(err)
		if errors.Is(err, context.DeadlineExceeded) {
			ls.ProbeReason = link.FailureUnreachable
		}
		return
	}
	for _, n := range LinkNeeds() {
		if n.Verb != "watch" {
			continue // the lists above were allowed
		}
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: n.Verb, Group: n.Group, Resource: n.Resource}},
		}, metav1.CreateOptions{})
		if err == nil && !r.Status.Allowed {
			ls.Denied = append(ls.Denied, n.String())
		}
	}
}

// trimSecretPrefix drops the "secret NS/NAME: " that FromSecret puts first:
// the result names the Secret already.
func trimSecretPrefix(err error) string {
	s := err.Error()
	if _, rest, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, "secret ") {
		return rest
	}
	return s
}

// review asks the API server, with SubjectAccessReviews, whether the
// component's ServiceAccount may do each of its needs.
func (c *collector) review(ctx context.Context, f *RBACFacts) {
	_, err := c.client.CoreV1().ServiceAccounts(f.Namespace).Get(ctx, f.ServiceAccount, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		f.AccountErr = describe(err)
		return
	}
	f.AccountFound = true
	user := "system:serviceaccount:" + f.Namespace + ":" + f.ServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + f.Namespace, "system:authenticated"}
	for i := range f.Access {
		n := f.Access[i].Need
		resource, sub, _ := strings.Cut(n.Resource, "/")
		r, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: n.Verb, Group: n.Group, Resource: resource, Subresource: sub, Namespace: n.Namespace, Name: n.Name}},
		}, metav1.CreateOptions{})
		if err != nil {
			f.Access[i].Err = describe(err)
			continue
		}
		f.Access[i].Allowed = r.Status.Allowed
	}
}

// lease reads the controller's leader election Lease.
func (c *collector) lease(ctx context.Context, f *LeaseFacts) {
	l, err := c.client.CoordinationV1().Leases(f.Cfg.LeaseNamespace).Get(ctx, f.Cfg.LeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		f.Err = describe(err)
		return
	}
	f.Found = true
	if l.Spec.HolderIdentity != nil {
		f.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		f.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		f.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
}

// nodePorts reads the NodePort range from kube-apiserver's flags, where
// its pod is visible (kubeadm's static pods); a managed control plane
// shows none.
func (c *collector) nodePorts(ctx context.Context, f *EgressFacts) {
	list, err := c.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil {
		f.NodePortsErr = describe(err)
		return
	}
	if len(list.Items) == 0 {
		f.NodePortsErr = "no kube-apiserver pod in kube-system, as with a managed control plane"
		return
	}
	p := list.Items[0]
	for _, ctr := range p.Spec.Containers {
		args := append(append([]string(nil), ctr.Command...), ctr.Args...)
		if !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "kube-apiserver") }) {
			continue
		}
		f.NodePorts, f.NodePortsFrom = "30000-32767", "kube-apiserver's default, pod kube-system/"+p.Name
		if v, ok := lastFlag(args, "service-node-port-range"); ok {
			f.NodePorts, f.NodePortsFrom = v, "kube-apiserver --service-node-port-range, pod kube-system/"+p.Name
		}
		return
	}
	f.NodePortsErr = "pod kube-system/" + p.Name + " runs no kube-apiserver command"
}

// lastFlag returns the last value of a flag of another program's command
// line (CoreDNS's, kube-apiserver's: flag sets check does not have): --name=value
// or --name value.
func lastFlag(args []string, name string) (v string, ok bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if val, found := strings.CutPrefix(a, name+"="); found {
			v, ok = val, true
		} else if a == name && i+1 < len(args) {
			v, ok = args[i+1], true
		}
	}
	return v, ok
}

// trustRoot reads the gateways' trust root: Options.GatewayCA, or the
// ca.crt of the gateway's certificate Secret (only that key is used).
func (c *collector) trustRoot(ctx context.Context, f *GatewayFacts, w Workload) {
	pem, from := c.o.GatewayCA, c.o.GatewayCAFrom
	if len(pem) == 0 {
		secret, key, ok := w.CASecret(f.Config.CAFile)
		if !ok {
			f.RootsErr = "the gateway's --tls-ca is not a file of a Secret volume; give --gateway-ca"
			return
		}
		from = fmt.Sprintf("%s of Secret %s/%s", key, w.Namespace, secret)
		s, err := c.client.CoreV1().Secrets(w.Namespace).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			f.RootsErr = from + ": " + describe(err)
			return
		}
		pem = s.Data[key]
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		f.RootsErr = from + ": no PEM certificate"
		return
	}
	f.Roots, f.RootsFrom = pool, from
}

package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NodeName is the simulated node of a cluster started with Workloads. KWOK
// runs the pods bound to it; there is no scheduler, so pod templates set
// spec.nodeName to this name.
const NodeName = "kwok-node-0"

// fieldManager is the server-side apply field manager of Apply.
const fieldManager = "mcmirror-harness"

// Cluster is one running Kubernetes control plane.
type Cluster struct {
	// Name of the cluster, e.g. "west".
	Name string
	// Server is the API server URL.
	Server string
	// Kubeconfig is the path of an admin kubeconfig with the CA embedded.
	Kubeconfig string
	// Config is the admin REST config.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// ServiceCIDR is the range ClusterIPs of this cluster come from.
	ServiceCIDR netip.Prefix
	// ServiceCIDRv6 is, in a cluster started with DualStack, the range
	// its IPv6 ClusterIPs come from; the zero Prefix otherwise.
	ServiceCIDRv6 netip.Prefix
	// PodCIDR is the range KWOK gives this cluster's pods their IPs from.
	PodCIDR netip.Prefix
	// Workloads says whether kube-controller-manager and KWOK run here.
	Workloads bool
	// DataPlane says whether the cluster has a node namespace with
	// kube-proxy and real pods (ClusterOptions.DataPlane).
	DataPlane bool

	env   *Env
	node  *node      // the node's network namespace, with a data plane or a real node
	real  *realNode  // the real node's processes, with RealNode
	pods  *podRunner // makes the node's pods real, with a data plane
	dir   string
	index int
	token string // admin bearer token

	// apiMu guards the API server's process, which StopAPIServer and
	// StartAPIServer replace; apiArgv starts it again the same way.
	apiMu   sync.Mutex
	apiProc *Process
	apiArgv []string

	mapperOnce sync.Once
	mapper     *restmapper.DeferredDiscoveryRESTMapper
	dynamic    dynamic.Interface

	// linkMu guards linkFile, the path LinkKubeconfigFile wrote.
	linkMu   sync.Mutex
	linkFile string
}

// startAPIServer starts kube-apiserver with RBAC, ServiceAccount tokens, its
// own etcd prefix and its own service CIDR.
func (c *Cluster) startAPIServer(etcdURL string) error {
	e := c.env
	port, err := freePort()
	if err != nil {
		return err
	}
	c.Server = "https://" + net.JoinHostPort(e.apiHost.String(), strconv.Itoa(port))
	c.token = randomToken()
	certs := filepath.Join(c.dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return err
	}
	crt, key := filepath.Join(certs, "apiserver.crt"), filepath.Join(certs, "apiserver.key")
	// Pods reach the API server at the kubernetes Service's ClusterIP, the
	// first address of the service CIDR.
	if err := e.pki.serving(crt, key, e.apiHost, c.ServiceCIDR.Addr().Next()); err != nil {
		return err
	}
	tokens := filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(c.kubeconfig("admin", c.token), c.Kubeconfig); err != nil {
		return err
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}
	bin, err := Binary("kube-apiserver")
	if err != nil {
		return err
	}
	c.apiArgv = []string{bin,
		"--etcd-servers=" + etcdURL,
		"--etcd-prefix=/" + c.Name,
		"--bind-address=" + e.apiHost.String(),
		"--advertise-address=" + e.apiHost.String(),
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + crt,
		"--tls-private-key-file=" + key,
		"--cert-dir=" + certs,
		"--client-ca-file=" + e.caFile,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + e.saPub,
		"--service-account-signing-key-file=" + e.saKey,
		"--service-cluster-ip-range=" + c.serviceClusterIPRange(),
		"--profiling=false",
	}
	if c.real == nil {
		c.apiArgv = append(c.apiArgv,
			// Pods of the tests carry no ServiceAccount volume.
			"--disable-admission-plugins=ServiceAccount",
			// The advertise address may be loopback, which Endpoints reject.
			"--endpoint-reconciler-type=none")
	} else {
		// exec, logs and port-forward go to the kubelet at the node's
		// address, with a client certificate of the environment's CA.
		kc, kk := filepath.Join(certs, "kubelet-client.crt"), filepath.Join(certs, "kubelet-client.key")
		if err := e.pki.client(kc, kk, "kube-apiserver-kubelet-client", "system:masters"); err != nil {
			return err
		}
		c.apiArgv = append(c.apiArgv,
			"--kubelet-client-certificate="+kc, "--kubelet-client-key="+kk,
			"--kubelet-preferred-address-types=InternalIP",
			"--endpoint-reconciler-type=lease")
	}
	c.apiProc, err = e.startProcess(c.Name+"/kube-apiserver", nil, c.apiArgv...)
	return err
}

// waitAPIServer waits until /readyz answers ok.
func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return c.env.poll(ctx, c.Name+"/kube-apiserver", c.apiReady)
}

// apiReady reports whether the API server's /readyz says ok.
func (c *Cluster) apiReady(ctx context.Context) (bool, error) {
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok", nil
}

// startWorkloads starts kube-controller-manager and KWOK and registers the
// simulated node, so StatefulSets get Running pods and EndpointSlices.
func (c *Cluster) startWorkloads() error {
	e := c.env
	kcm, err := Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	kwok, err := Binary("kwok")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	if _, err := e.startProcess(c.Name+"/kube-controller-manager", nil,
		kcm,
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--controllers=*",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+e.saKey,
		"--root-ca-file="+e.caFile,
		"--cluster-name="+c.Name,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(c.dir, "kcm-certs"),
	); err != nil {
		return err
	}
	if c.real != nil {
		return nil // the kubelet runs the node
	}
	// KWOK keeps a node Lease (--node-lease-duration-seconds); without it the
	// node-lifecycle controller marks the node NotReady and endpoints unready.
	if _, err := e.startProcess(c.Name+"/kwok", []string{"HOME=" + c.dir},
		kwok,
		"--kubeconfig="+c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40",
		"--cidr="+c.PodCIDR.String(),
		"--node-ip="+c.kwokNodeIP(),
	); err != nil {
		return err
	}
	return nil
}

// waitWorkloads registers the simulated node and waits until it is Ready.
func (c *Cluster) waitWorkloads(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				"kubernetes.io/hostname": NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", "topology.kubernetes.io/zone": c.Name + "-a",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: c.PodCIDR.String(), PodCIDRs: []string{c.PodCIDR.String()}},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: create node: %w", c.Name, err)
	}
	// KWOK marks the node Ready within a second or two; a minute means it
	// will not.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.env.poll(ctx, c.Name+"/kwok node", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	return c.warmIPPool(ctx)
}

// warmIPPool has KWOK give one pod an IP before any test makes pods. KWOK
// v0.7.0 makes a CIDR's address pool on the first pod that needs one, with
// a load and then a store that are not one step (PodController.ipPool): two
// pods that come at once, such as a StatefulSet's with the Parallel policy,
// each make a pool and both get its first address. A pool made here, by one
// pod, is the one every later pod shares. The pod is deleted again.
func (c *Cluster) warmIPPool(ctx context.Context) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-ip-pool", Namespace: metav1.NamespaceSystem},
		Spec: corev1.PodSpec{
			NodeName:   NodeName,
			Containers: []corev1.Container{{Name: "pause", Image: "pause"}},
		},
	}
	pods := c.Client.CoreV1().Pods(metav1.NamespaceSystem)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: create pod %s: %w", c.Name, pod.Name, err)
	}
	if err := c.env.poll(ctx, c.Name+"/kwok pod IP", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.PodIP != "", nil
	}); err != nil {
		return err
	}
	zero := int64(0)
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: delete pod %s: %w", c.Name, pod.Name, err)
	}
	return nil
}

// kubeconfig is a kubeconfig for this cluster with the CA embedded and the
// given bearer token.
func (c *Cluster) kubeconfig(user, token string) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.env.pki.CAPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: user}
	cfg.CurrentContext = c.Name
	return *cfg
}

// ServiceAccountKubeconfig returns a kubeconfig, as bytes, that authenticates
// to this cluster as ServiceAccount ns/name with a token from the TokenRequest
// API, valid for an hour. It is what a link Secret holds.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, ns, name string) ([]byte, error) {
	return c.ServiceAccountKubeconfigTTL(ctx, ns, name, time.Hour)
}

// ServiceAccountKubeconfigTTL is ServiceAccountKubeconfig with a token
// valid for ttl.
func (c *Cluster) ServiceAccountKubeconfigTTL(ctx context.Context, ns, name string, ttl time.Duration) ([]byte, error) {
	expiry := int64(ttl / time.Second)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: token for %s/%s: %w", c.Name, ns, name, err)
	}
	return clientcmd.Write(c.kubeconfig(name, tr.Status.Token))
}

// ServiceAccountConfig is ServiceAccountKubeconfig as a REST config.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	kc, err := c.ServiceAccountKubeconfig(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(kc)
}

// ServiceAccountKubeconfigFile writes ServiceAccountKubeconfig's kubeconfig
// to dir/<ns>-<name>.kubeconfig and returns the path: what a process that
// runs as a Deployment's ServiceAccount, off the cluster, reads instead of
// the in-cluster configuration.
func (c *Cluster) ServiceAccountKubeconfigFile(ctx context.Context, dir, ns, name string) (string, error) {
	kc, err := c.ServiceAccountKubeconfig(ctx, ns, name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, ns+"-"+name+".kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// Apply creates or updates every object of a multi-document YAML manifest
// with server-side apply. Namespaced objects without a namespace go to
// "default".
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	return c.eachObject(manifest, func(ri dynamic.ResourceInterface, u *unstructured.Unstructured) error {
		data, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: fieldManager, Force: new(true)})
		return err
	})
}

// Delete deletes every object of a manifest; objects already gone are fine.
func (c *Cluster) Delete(ctx context.Context, manifest string) error {
	return c.eachObject(manifest, func(ri dynamic.ResourceInterface, u *unstructured.Unstructured) error {
		err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// eachObject decodes manifest and calls f with the resource client of each
// object.
func (c *Cluster) eachObject(manifest string, f func(dynamic.ResourceInterface, *unstructured.Unstructured) error) error {
	c.mapperOnce.Do(func() {
		c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	})
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	for n := 1; ; n++ {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: manifest document %d: %w", c.Name, n, err)
		}
		if len(u.Object) == 0 {
			continue // an empty document, e.g. a trailing "---"
		}
		gvk := u.GroupVersionKind()
		mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			c.mapper.Reset() // a CRD may have been added since discovery
			mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("%s: %s %q: %w", c.Name, gvk.Kind, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = c.dynamic.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if u.GetNamespace() == "" {
				u.SetNamespace(metav1.NamespaceDefault)
			}
			ri = c.dynamic.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		if err := f(ri, u); err != nil {
			return fmt.Errorf("%s: %s %s/%s: %w", c.Name, gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}

// poll calls cond every 100ms until it is true, ctx ends, or a process of the
// environment exits, whichever comes first.
func (e *Env) poll(ctx context.Context, what string, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p := e.exited(); p != nil {
			return false, fmt.Errorf("%s exited: %v\n%s", p.Name, p.err, p.Tail(30))
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Scale sets the replicas of StatefulSet ns/name with a patch of its scale
// subresource, as kubectl scale does: a patch carries no resourceVersion,
// so the StatefulSet controller writing its status meanwhile is no
// conflict (a get and update of the scale was, now and then).
func (c *Cluster) Scale(ctx context.Context, ns, name string, replicas int) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.Client.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale"); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	return nil
}

// LabelService sets label key of Service ns/name to value, or removes it
// when value is empty.
func (c *Cluster) LabelService(ctx context.Context, ns, name, key, value string) error {
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%s:%s}}}`, strconv.Quote(key), v)
	if _, err := c.Client.CoreV1().Services(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	return nil
}

// kwokNodeIP is the address KWOK gives the node: the node's own with a data
// plane (kube-proxy reads it), loopback otherwise.
func (c *Cluster) kwokNodeIP() string {
	if c.node != nil {
		return c.node.ip.String()
	}
	return "127.0.0.1"
}

// WriteKubeconfig writes one kubeconfig with a context per cluster, named
// as the cluster, each with its own admin user: what a user whose kubectl
// reaches every cluster of the fleet has.
func (e *Env) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	for _, c := range e.clusters {
		user := "admin-" + c.Name
		cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: e.pki.CAPEM}
		cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: c.token}
		cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: user}
	}
	cfg.CurrentContext = e.clusters[0].Name
	return clientcmd.WriteToFile(*cfg, path)
}

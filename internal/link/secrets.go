package link

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// SecretWatcherOptions configures a SecretWatcher.
type SecretWatcherOptions struct {
	// Namespace holds the link Secrets.
	Namespace string
	// Selector narrows the Secrets looked at; nil selects every Secret of
	// type mirror.linkerd.io/remote-kubeconfig in Namespace.
	Selector k8slabels.Selector
	// Reserved are cluster names a Secret may not take: the local
	// cluster's and the static links'. A Secret must not silently replace
	// a link an operator wrote into the configuration.
	Reserved []string
	// Allow is what the kubeconfigs of the Secrets may use beyond inline
	// credentials over verified https; the zero value, nothing, is the
	// default (see Check).
	Allow Allow
	// Logf reports Secrets that are refused, and why. Nil discards.
	Logf func(format string, args ...any)
	// OnRefused, when set, is told of every Secret refused, after Logf:
	// for metrics and Events. err says why, without naming the Secret.
	// It is called with the watcher's lock held: it must not call back.
	OnRefused func(s *corev1.Secret, reason Reason, err error)
}

// SecretWatcher turns the link Secrets of one namespace of the local cluster
// into links: Add when a Secret appears, Add again when its kubeconfig
// changes, Remove and Add when the cluster it names changes, Remove when it
// goes away.
//
// Two Secrets naming the same cluster: the first one seen wins, and the
// other takes over when the first is deleted. A Secret updated with a
// kubeconfig that cannot be used, or that is refused (see Check), is
// reported and ignored, and the link keeps running on the last good one: a
// bad edit must not cut a cluster off, and the refused kubeconfig is never
// used.
type SecretWatcher struct {
	handler   Handler
	reserved  []string
	allow     Allow
	logf      func(string, ...any)
	onRefused func(*corev1.Secret, Reason, error)

	informer cache.SharedIndexInformer
	// reg tells when the initial list has reached the handler, which is
	// when every link that exists at start-up has been added.
	reg cache.ResourceEventHandlerRegistration

	mu sync.Mutex
	// bySecret is the link each Secret (namespace/name) runs.
	bySecret map[string]secretLink
	// owner is the Secret that runs each cluster's link.
	owner map[string]string
}

type secretLink struct {
	name string
	// sum identifies the kubeconfig, and ns is the namespaces of the
	// annotations, so that an update that changes something else (another
	// annotation, say) does not restart the link.
	sum [sha256.Size]byte
	ns  Namespaces
}

// NewSecretWatcher returns a watcher of the link Secrets that client sees
// in opts.Namespace; Run starts it.
func NewSecretWatcher(client kubernetes.Interface, h Handler, opts SecretWatcherOptions) (*SecretWatcher, error) {
	if opts.Namespace == "" {
		return nil, fmt.Errorf("link secrets: no namespace")
	}
	w := &SecretWatcher{
		handler:   h,
		reserved:  opts.Reserved,
		allow:     opts.Allow,
		logf:      opts.Logf,
		onRefused: opts.OnRefused,
		bySecret:  map[string]secretLink{},
		owner:     map[string]string{},
	}
	if w.logf == nil {
		w.logf = func(string, ...any) {}
	}
	if w.onRefused == nil {
		w.onRefused = func(*corev1.Secret, Reason, error) {}
	}

	selector := ""
	if opts.Selector != nil {
		selector = opts.Selector.String()
	}
	// The API server filters Secrets by type; fakes do not, so the
	// handler checks the type again.
	fieldSelector := "type=" + labels.LinkSecretType
	secrets := client.CoreV1().Secrets(opts.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = selector, fieldSelector
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = selector, fieldSelector
			return secrets.Watch(ctx, o)
		},
	}
	w.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Secret{}, 0, cache.Indexers{})
	upsert := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			w.upsert(s)
		}
	}
	reg, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok {
				w.delete(s)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	w.reg = reg
	return w, nil
}

// Run watches the Secrets until ctx is done.
func (w *SecretWatcher) Run(ctx context.Context) { w.informer.Run(ctx.Done()) }

// HasSynced reports whether every Secret that existed when Run started has
// been handled.
func (w *SecretWatcher) HasSynced() bool { return w.reg.HasSynced() }

func key(s *corev1.Secret) string { return s.Namespace + "/" + s.Name }

func (w *SecretWatcher) upsert(s *corev1.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()

	k := key(s)
	old, running := w.bySecret[k]
	name, cfg, ns, err := fromLinkSecret(s, w.allow)
	if err != nil {
		keeping := ""
		if running {
			keeping = fmt.Sprintf("; keeping the running link to cluster %q", old.name)
		}
		w.refuse(s, ReasonOf(err), err, keeping)
		return
	}
	if slices.Contains(w.reserved, name) {
		w.refuse(s, ReasonReserved, fmt.Errorf("cluster %q is the local cluster or a configured link", name), "")
		if running {
			w.stop(k, old)
		}
		return
	}
	sum := sha256.Sum256(s.Data[labels.LinkSecretKey])
	if running && old.name == name && old.sum == sum && old.ns.Equal(ns) {
		return // nothing DNS depends on changed
	}
	if running && old.name != name {
		// The Secret names another cluster now.
		w.stop(k, old)
		w.adopt(old.name)
	}
	if other, taken := w.owner[name]; taken && other != k {
		w.refuse(s, ReasonDuplicate, fmt.Errorf("cluster %q is already linked by secret %s", name, other), "")
		return
	}
	// A new link, or the kubeconfig or the namespaces of this one changed:
	// the handler restarts it.
	w.link(k, secretLink{name: name, sum: sum, ns: ns}, cfg)
}

// link makes Secret k run l through cfg.
func (w *SecretWatcher) link(k string, l secretLink, cfg *rest.Config) {
	w.bySecret[k] = l
	w.owner[l.name] = k
	w.handler.Add(l.name, cfg, l.ns)
}

// refuse logs that Secret s is refused, and why (then what still runs),
// and tells OnRefused.
func (w *SecretWatcher) refuse(s *corev1.Secret, reason Reason, err error, then string) {
	w.logf("link secret %s refused (%s): %v%s", key(s), reason, err, then)
	w.onRefused(s, reason, err)
}

func (w *SecretWatcher) delete(s *corev1.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := key(s)
	if l, running := w.bySecret[k]; running {
		w.stop(k, l)
		w.adopt(l.name)
	}
}

func (w *SecretWatcher) stop(k string, l secretLink) {
	delete(w.bySecret, k)
	if w.owner[l.name] == k {
		delete(w.owner, l.name)
	}
	w.handler.Remove(l.name)
}

// adopt starts the link to cluster name from another Secret that names it,
// if there is one: the one that lost a tie when the link was taken.
func (w *SecretWatcher) adopt(name string) {
	if _, taken := w.owner[name]; taken {
		return
	}
	var candidates []*corev1.Secret
	for _, obj := range w.informer.GetStore().List() {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			continue
		}
		if _, running := w.bySecret[key(s)]; running {
			continue
		}
		if n, ok := ClusterNameOf(s); ok && n == name {
			candidates = append(candidates, s)
		}
	}
	slices.SortFunc(candidates, func(a, b *corev1.Secret) int { return strings.Compare(key(a), key(b)) })
	for _, s := range candidates {
		// A Secret that fails here was reported when it was seen.
		n, cfg, ns, err := fromLinkSecret(s, w.allow)
		if err != nil || n != name {
			continue
		}
		w.link(key(s), secretLink{name: name, sum: sha256.Sum256(s.Data[labels.LinkSecretKey]), ns: ns}, cfg)
		return
	}
}

// fromLinkSecret is fromSecret with the namespaces of the Secret's
// annotations: a Secret whose annotations do not parse is refused as
// invalid, as a bad kubeconfig is.
func fromLinkSecret(s *corev1.Secret, allow Allow) (string, *rest.Config, Namespaces, error) {
	name, cfg, err := fromSecret(s, allow)
	if err != nil {
		return "", nil, Namespaces{}, err
	}
	ns, err := NamespacesOf(s)
	if err != nil {
		return "", nil, Namespaces{}, err
	}
	return name, cfg, ns, nil
}

package controller

// Refused link Secrets. The link Secret watcher keeps a running link when
// an update of its Secret is refused, but after a restart or a leader
// failover that Secret links nothing: without this, the cluster would look
// unlinked and the orphan sweep would delete every one of its mirrors. A
// cluster named by a refused Secret is treated as an unreachable link
// instead: its mirrors stay until the Secret is fixed (the link runs) or
// deleted (the mirrors go, as for any removed link). Whether the Secret
// still exists and names the cluster is checked against the API, so a
// stale memory never holds mirrors for long.

import (
	"context"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// refusedRecheck is how often the keys of a cluster held by a refused
// link Secret look whether that Secret still exists.
const refusedRecheck = 30 * time.Second

// ReasonLinkSecretRefused is the reason of the warning Event recorded on a
// link Secret that was refused (LinkRefused).
const ReasonLinkSecretRefused = "LinkSecretRefused"

// refusedLink is the refused Secret that names a cluster.
type refusedLink struct {
	secret types.NamespacedName
	// checked is when the Secret was last seen to exist and name the
	// cluster.
	checked time.Time
}

// LinkRefused reports a link Secret that was refused, for the reason given
// (a link.Reason) and err: a warning Event on the Secret, and the
// link_refused_total metric. It is a link.SecretWatcherOptions.OnRefused.
// The cluster the Secret names keeps its mirrors while no link to it runs.
func (c *Controller) LinkRefused(s *corev1.Secret, reason link.Reason, err error) {
	linkRefusedTotal.WithLabelValues(string(reason)).Inc()
	c.recorder.Eventf(s, corev1.EventTypeWarning, ReasonLinkSecretRefused, "Link Secret refused (%s): %v", reason, err)
	name, ok := link.ClusterNameOf(s)
	if !ok || name == c.opts.Cluster {
		return
	}
	// Remembered even while a link to the cluster runs (a refused update
	// keeps it running): it is only looked at once no link runs, and
	// then checked against the Secret itself.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused[name] = refusedLink{secret: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, checked: c.now()}
	klog.InfoS("Link Secret refused: the cluster's mirrors are kept while it exists and no link to the cluster runs", "cluster", name, "secret", klog.KObj(s))
}

// heldByRefusedLink reports whether a refused link Secret that names
// cluster still exists. It looks at most every refusedRecheck (a list of
// that one Secret: the watch permission covers it); a Secret gone, or
// naming another cluster now, releases the cluster, whose mirrors are then
// swept as those of any removed link.
func (c *Controller) heldByRefusedLink(ctx context.Context, cluster string) bool {
	c.mu.Lock()
	rl, ok := c.refused[cluster]
	c.mu.Unlock()
	if !ok {
		return false
	}
	if c.now().Sub(rl.checked) < refusedRecheck {
		return true
	}
	list, err := c.client.CoreV1().Secrets(rl.secret.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", rl.secret.Name).String(),
	})
	if err != nil {
		// Unknown: keep the mirrors, look again later.
		klog.FromContext(ctx).V(2).Info("Cannot check a refused link Secret; keeping the cluster's mirrors", "cluster", cluster, "secret", rl.secret, "err", err)
		return true
	}
	still := slices.ContainsFunc(list.Items, func(s corev1.Secret) bool {
		n, ok := link.ClusterNameOf(&s)
		return ok && n == cluster && s.Name == rl.secret.Name
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.refused[cluster]; !ok || cur.secret != rl.secret {
		return ok
	}
	if !still {
		delete(c.refused, cluster)
		klog.FromContext(ctx).Info("Refused link Secret is gone: the cluster is unlinked", "cluster", cluster, "secret", rl.secret)
		return false
	}
	rl.checked = c.now()
	c.refused[cluster] = rl
	return true
}

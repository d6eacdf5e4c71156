package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/mcmirror/mcmirror/internal/corefile"
	"github.com/mcmirror/mcmirror/internal/dnspatch"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// corefileFrom, on the ConfigMap dns apply writes, says which ConfigMap
// and key its Corefile was made from; revert deletes only a ConfigMap
// that carries it.
const corefileFrom = "mcmirror.dev/corefile-from"

// corefileStep is what apply does to the Corefile when --corefile-stanza is
// given: the cluster's own Corefile, with mcmirror's stanza added, written
// to a ConfigMap of its own that the patch points the Deployment at.
type corefileStep struct {
	stanzaFile, stanza string
	configMap          string   // what the patch points the volume at
	zone               string   // --cluster-domain
	upstream           []string // --upstream
	resolvConf         string   // --resolv-conf: the file the DNS pods get as /etc/resolv.conf
}

// parseCorefileFlags checks the flags of the Corefile step, and reads the
// stanza file.
func (c *dnsCmd) parseCorefileFlags(upstream string) error {
	s := &c.corefile
	for _, u := range strings.Split(upstream, ",") {
		if u = strings.TrimSpace(u); u != "" {
			s.upstream = append(s.upstream, u)
		}
	}
	if s.stanzaFile == "" {
		if len(s.upstream) > 0 {
			return errors.New("--upstream needs --corefile-stanza")
		}
		return nil
	}
	data, err := os.ReadFile(s.stanzaFile)
	if err != nil {
		return fmt.Errorf("--corefile-stanza: %v", err)
	}
	s.stanza = string(data)
	return nil
}

// derivedCorefile is the ConfigMap the Corefile step writes.
type derivedCorefile struct {
	cm  *corev1.ConfigMap
	log []string
}

// deriveCorefile reads the Corefile the CoreDNS of the original pod
// template (the recorded one, once applied) runs, adds the stanza, and
// checks that the result forwards nowhere back to itself. It writes
// nothing: every refusal comes before any write.
func (c *dnsCmd) deriveCorefile(ctx context.Context, obj *unstructured.Unstructured) (*derivedCorefile, error) {
	s := c.corefile
	tmplJSON, err := json.Marshal(obj.Object["spec"].(map[string]any)["template"])
	if err != nil {
		return nil, err
	}
	if orig, found, err := dnspatch.OriginalOf(obj.Object); err != nil {
		return nil, fmt.Errorf("%s: %v; nothing was changed", c.ref(), err)
	} else if found && len(orig["template"]) > 0 {
		tmplJSON = orig["template"]
	}
	var tmpl corev1.PodTemplateSpec
	if err := json.Unmarshal(tmplJSON, &tmpl); err != nil {
		return nil, fmt.Errorf("%s: its pod template: %v", c.ref(), err)
	}
	src, err := corefile.SourceOf(tmpl.Spec, "")
	if err != nil {
		return nil, fmt.Errorf("%s: where its CoreDNS reads the Corefile from: %v; nothing was changed", c.ref(), err)
	}
	if src.ConfigMap == s.configMap {
		return nil, fmt.Errorf("%s reads its Corefile from ConfigMap %s already, but has no annotation %s (patched by hand?): "+
			"put its own Corefile's ConfigMap back in volume %s first (kubectl -n %s rollout undo deployment %s); nothing was changed",
			c.ref(), s.configMap, dnspatch.Annotation, src.Volume, c.ns, c.name)
	}
	cms := c.configMaps()
	orig, err := cms.Get(ctx, src.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s reads its Corefile from ConfigMap %s/%s, key %s: %w; nothing was changed",
			c.ref(), c.ns, src.ConfigMap, src.Key, c.configMapError("get", src.ConfigMap, err))
	}
	text, ok := orig.Data[src.Key]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %s, the Corefile %s reads; nothing was changed", c.ns, src.ConfigMap, src.Key, c.ref())
	}
	from := fmt.Sprintf("ConfigMap %s/%s, key %s", c.ns, src.ConfigMap, src.Key)
	res, err := corefile.Add(text, corefile.Edit{Zone: s.zone, ClusterSet: "clusterset.local", Stanza: s.stanza, Upstream: s.upstream})
	if err != nil {
		return nil, fmt.Errorf("the cluster's Corefile (%s): %v; nothing was changed", from, err)
	}
	if s.resolvConf != "" {
		resolv, err := os.ReadFile(s.resolvConf)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("--resolv-conf: %v", err)
		}
		// The lines of the cluster's own Corefile, unless --upstream
		// changed its forwards.
		checked := text
		if len(s.upstream) > 0 {
			checked = res.Corefile
		}
		loops, err := corefile.Loops(checked, string(resolv))
		if err != nil {
			return nil, err
		}
		if len(loops) > 0 {
			return nil, fmt.Errorf("the cluster's Corefile (%s) with mcmirror's block would send queries back to the DNS pods themselves: %s. "+
				"Set dns.upstream to the resolvers the cluster DNS should ask instead (helm upgrade --install ... --set 'dns.upstream={10.0.0.2}'; "+
				"on a node whose resolver is systemd-resolved, the nameservers of its /run/systemd/resolve/resolv.conf), "+
				"or give the kubelet a resolvConf whose nameservers are not local; nothing was changed",
				from, strings.Join(loops, "; "))
		}
	}
	data := maps.Clone(orig.Data)
	data[src.Key] = res.Corefile
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: s.configMap, Namespace: c.ns,
			Labels: map[string]string{
				"app.kubernetes.io/part-of":    "mcmirror",
				"app.kubernetes.io/name":       "mcmirror-coredns",
				"app.kubernetes.io/managed-by": dnsFieldManager,
			},
			Annotations: map[string]string{corefileFrom: from}},
		Data:       data,
		BinaryData: orig.BinaryData,
	}
	d := &derivedCorefile{cm: cm, log: []string{fmt.Sprintf("Corefile of %s, with mcmirror's block added to %s", from, res.Block)}}
	if res.Lameduck != "" {
		d.log = append(d.log, res.Lameduck+" (the rollout's guarantee: deploy/README.md, \"The cluster DNS\")")
	}
	if res.Labels != "" {
		d.log = append(d.log, res.Labels+" (import mode: mcmirror answers the mirrors' copies of the linked clusters' endpoints)")
	}
	for _, f := range res.Forwards {
		d.log = append(d.log, "upstream (--upstream): "+f)
	}
	return d, nil
}

// writeCorefile creates or updates the ConfigMap of d.
func (c *dnsCmd) writeCorefile(ctx context.Context, d *derivedCorefile) error {
	cms := c.configMaps()
	_, err := cms.Create(ctx, d.cm, metav1.CreateOptions{FieldManager: dnsFieldManager})
	if apierrors.IsAlreadyExists(err) {
		var cur *corev1.ConfigMap
		if cur, err = cms.Get(ctx, d.cm.Name, metav1.GetOptions{}); err == nil {
			if _, ours := cur.Annotations[corefileFrom]; !ours {
				return fmt.Errorf("ConfigMap %s/%s exists and was not written by dns apply (no annotation %s): "+
					"delete it (an older release's Corefile) and run again; nothing was changed", c.ns, d.cm.Name, corefileFrom)
			}
			d.cm.ResourceVersion = cur.ResourceVersion
			_, err = cms.Update(ctx, d.cm, metav1.UpdateOptions{FieldManager: dnsFieldManager})
		}
	}
	if err != nil {
		return fmt.Errorf("write ConfigMap %s/%s: %w; the Deployment was not changed", c.ns, d.cm.Name, c.configMapError("write", d.cm.Name, err))
	}
	for _, l := range d.log {
		c.progress("ConfigMap %s: %s", d.cm.Name, l)
	}
	return nil
}

// cleanUp deletes, once revert has put the Deployment d back on its own
// and its rollout is over, what the patched Deployment left: the
// ReplicaSets of its template (--prune-history) and the ConfigMap apply
// wrote.
func (c *dnsCmd) cleanUp(ctx context.Context, d *unstructured.Unstructured) error {
	if c.pruneHistory {
		rss, err := c.clients.AppsV1().ReplicaSets(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list the ReplicaSets of %s: %w", c.ref(), err)
		}
		for _, name := range dnspatch.PatchedHistory(rss.Items, d.GetUID()) {
			err := c.clients.AppsV1().ReplicaSets(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete ReplicaSet %s/%s, of the patched template: %w", c.ns, name, err)
			}
			c.progress("deleted ReplicaSet %s, of the patched template (no pod left): rollout undo cannot bring it back", name)
		}
	}
	return c.deleteCorefile(ctx)
}

// deleteCorefile deletes the ConfigMap apply wrote, once revert has put
// the Deployment back on its own.
func (c *dnsCmd) deleteCorefile(ctx context.Context) error {
	name := c.corefile.configMap
	if name == "" {
		return nil
	}
	cm, err := c.configMaps().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return c.configMapError("get", name, err)
	}
	if _, ours := cm.Annotations[corefileFrom]; !ours {
		c.progress("ConfigMap %s was not written by dns apply (no annotation %s): left as it is", name, corefileFrom)
		return nil
	}
	err = c.configMaps().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.configMapError("delete", name, err)
	}
	c.progress("deleted ConfigMap %s, the Corefile dns apply made from %s", name, cm.Annotations[corefileFrom])
	return nil
}

// configMapError says what a failed call on a ConfigMap means.
func (c *dnsCmd) configMapError(verb, name string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("RBAC refuses to %s ConfigMap %s/%s (403): the Job's Role (kube-system/mcmirror-dns-patch) names the ConfigMaps "+
			"coredns-mcmirror and the value dns.coredns.configMap, the ConfigMap of the cluster's Corefile: set dns.coredns.configMap to %s; the API server said: %w",
			verb, c.ns, name, name, err)
	}
	return err
}

package watch

import (
	"fmt"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	"k8s.io/client-go/kubernetes"
)

// Links narrowed to some namespaces of their cluster (link.Namespaces):
// the watches of the link list and watch those alone (remote.Requests),
// so that no name of the others is answered.

// AddNarrowedLink watches a linked cluster through client, in the
// namespaces ns allows. It fails when the name is taken (by the local
// cluster or another link) or is not a valid cluster name.
func (c *Watcher) AddNarrowedLink(name string, client kubernetes.Interface, ns link.Namespaces) error {
	if err := labels.ValidateClusterName(name); err != nil {
		return err
	}
	if _, ok := c.links.Get(name); ok || name == c.local {
		return fmt.Errorf("cluster %q is already watched", name)
	}
	if c.imports {
		return errImportLinks
	}
	c.links.AddNarrowed(name, client, ns)
	return nil
}

// ReplaceNarrowedLink watches a linked cluster through client, in the
// namespaces ns allows, the one already linked by that name (if any)
// going on serving until client's watches have synced: for a kubeconfig,
// or namespaces, that changed.
func (c *Watcher) ReplaceNarrowedLink(name string, client kubernetes.Interface, ns link.Namespaces) error {
	if err := labels.ValidateClusterName(name); err != nil {
		return err
	}
	if name == c.local {
		return fmt.Errorf("cluster %q is the local cluster", name)
	}
	if c.imports {
		return errImportLinks
	}
	c.links.AddNarrowed(name, client, ns)
	return nil
}

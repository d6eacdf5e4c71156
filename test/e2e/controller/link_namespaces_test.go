package controller_test

import (
	"context"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

const zone = "svc.cluster.local."

// exportBoth exports, from west, the flat StatefulSet db (one pod) in
// left, the namespace the link leaves out, then in kept: by the time
// kept's has come, the same watches have sent left's, had they been
// asked for it.
func exportBoth(t *testing.T, left, kept string) {
	t.Helper()
	west := env.Cluster("west")
	for _, ns := range []string{left, kept} {
		require.NoError(t, west.Apply(context.Background(), statefulSet(ns, "db", 1, labels.ExportFlat)))
	}
}

// requireComes waits until west's ns/db has, in east, its name in the
// DNS server s (the pod's address), its mirror, and its import (west's
// pod).
func requireComes(t *testing.T, s *harness.DNSServer, ns string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods := podIPs(c, env.Cluster("west"), ns)
		require.Len(c, pods, 1)
		r := s.Ask(c, "tcp", "db-west."+ns+"."+zone, dns.TypeA)
		assert.Equal(c, []string{pods["db-set-0"]}, harness.Answers(r), "name db-west.%s", ns)
		m := mirrors(c, ns)
		assert.Contains(c, m, "db-west", "mirror")
		imp := requireImport(c, ns, "db", "ServiceImport %s/db", ns)
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "west"}}, imp.si.Status.Clusters)
		assert.Equal(c, pods, byHostname(imp.slices["west"]))
	}, wait, tick)
}

// assertLeftOut checks that west's ns/db has, in east, no name in s, no
// mirror and no import. t may be a *testing.T or, inside EventuallyWithT,
// the collector.
func assertLeftOut(t require.TestingT, s *harness.DNSServer, ns string) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	ctx := context.Background()
	for _, name := range []string{"db-west." + ns + "." + zone, "db-set-0.db-west." + ns + "." + zone, "db-global." + ns + "." + zone} {
		assert.Equal(t, dns.RcodeToString[dns.RcodeNameError], dns.RcodeToString[s.Ask(t, "tcp", name, dns.TypeA).Rcode], name)
	}
	assert.Empty(t, names(mirrors(t, ns)), "mirrors in %s", ns)
	_, err := mcsClient(t, "east").MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "db", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "ServiceImport %s/db: %v", ns, err)
}

// A link Secret that denies a namespace (its annotation
// mcmirror.dev/denied-namespaces): nothing west exports there gets a
// name in east's DNS, a mirror or an import, while what it exports in
// another namespace gets all three. Without the annotation, the link is
// watched anew and the denied namespace's export comes; with it again, it
// goes.
func TestLinkDeniedNamespace(t *testing.T) {
	const shop, tenant, linkNS = "e2e-ns-shop", "e2e-ns-tenant", "e2e-ns-links"
	ctx := setUp(t, shop, "east", "west")
	namespace(t, tenant, "east", "west")
	namespace(t, linkNS, "east")
	east, west := env.Cluster("east"), env.Cluster("west")
	secret := east.CreateLinkSecret(t, linkNS, "west", west.LinkData(t))
	secret.Annotations = map[string]string{labels.LinkDeniedNamespaces: tenant}
	secret, err := east.Client.CoreV1().Secrets(linkNS).Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)

	f := env.StartFleet(t, harness.FleetOptions{Local: "east", LinkSecrets: linkNS, Parts: harness.FleetDNS | harness.FleetController})
	exportBoth(t, tenant, shop)
	requireComes(t, f.DNS, shop)
	assertLeftOut(t, f.DNS, tenant)

	// The annotation goes: the link is watched anew, every namespace.
	secret.Annotations = nil
	secret, err = east.Client.CoreV1().Secrets(linkNS).Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	requireComes(t, f.DNS, tenant)

	// It comes back: what the namespace had here goes, the rest stays.
	secret.Annotations = map[string]string{labels.LinkDeniedNamespaces: tenant}
	_, err = east.Client.CoreV1().Secrets(linkNS).Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assertLeftOut(c, f.DNS, tenant) }, wait, tick)
	requireComes(t, f.DNS, shop)
	env.RequireAlive(t, f.Processes()...)
}

// A static link allowed one namespace (the Corefile's allowed_namespaces,
// the controller's --link-allowed-namespaces): what west exports in
// another gets no name, no mirror and no import.
func TestLinkAllowedNamespace(t *testing.T) {
	env.LogOnFailure(t)
	const shop, tenant = "e2e-ns-static-shop", "e2e-ns-static-tenant"
	namespace(t, shop, "east", "west")
	namespace(t, tenant, "east", "west")
	f := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetDNS | harness.FleetController,
		Block:      []string{"allowed_namespaces west " + shop},
		Controller: harness.ControllerOptions{Args: []string{"--link-allowed-namespaces", "west=" + shop}}})
	exportBoth(t, tenant, shop)
	requireComes(t, f.DNS, shop)
	assertLeftOut(t, f.DNS, tenant)
	env.RequireAlive(t, f.Processes()...)
}

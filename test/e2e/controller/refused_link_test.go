package controller_test

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A link Secret edited into a kubeconfig that is refused (an exec plugin)
// keeps its running link; after a restart it links nothing, and the
// cluster is an unreachable link, not a removed one: every mirror and
// per-pod mirror stays. Deleting the Secret then sweeps them.
func TestRefusedLinkSecretKeepsMirrorsAcrossRestart(t *testing.T) {
	const ns, secretNS = "e2e-refused", "e2e-refused-links"
	ctx := setUp(t, ns, "east", "paris")
	namespace(t, secretNS, "east")
	east, paris := env.Cluster("east"), env.Cluster("paris")
	secret := east.CreateLinkSecret(t, secretNS, "paris", paris.LinkData(t))
	o := eastController("controller", "--v", "4")
	o.LinkSecrets = secretNS
	first := env.StartFleet(t, o).Controller.Process
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, "db", 2, "true")))
	want := []string{"db-paris", "db-set-0-paris", "db-set-1-paris"}
	before := waitMirrors(t, ns, want...)

	// The Secret is edited: the same server, through an exec plugin,
	// which is refused.
	cfg, err := clientcmd.Load(secret.Data[labels.LinkSecretKey])
	require.NoError(t, err)
	user := cfg.Contexts[cfg.CurrentContext].AuthInfo
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/true", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
	bad, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	secret.Data[labels.LinkSecretKey] = bad
	_, err = east.Client.CoreV1().Secrets(secretNS).Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, first.Log(c), "link secret "+secretNS+"/"+secret.Name+" refused (exec)")
	}, wait, tick)

	// A restart (or a leader failover): the Secret links nothing now.
	first.Stop()
	o.Controller.Name = "controller-restarted"
	second := env.StartFleet(t, o).Controller.Process
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b := second.Log(c)
		assert.Regexp(c, `"Synced".* key="paris/`+ns+`/db".* skipped="link secret refused"`, b)
	}, wait, tick, "the sweep's sync of paris's mirrors leaves them alone")
	env.RequireAlive(t, second)
	after := mirrors(t, ns)
	require.Equal(t, want, names(after))
	for name, b := range before {
		assert.Equal(t, b.UID, after[name].UID, "%s kept", name)
	}

	// The Secret goes: paris is unlinked, its mirrors are swept.
	require.NoError(t, east.Client.CoreV1().Secrets(secretNS).Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	waitMirrors(t, ns)
}

package dnspatch

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// fixture is kube-system/coredns as kubeadm makes it, decoded as the
// dynamic client decodes what the API server sends.
func fixture(t testing.TB) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kubeadm-coredns.yaml"))
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(b)
	require.NoError(t, err)
	return decode(t, js)
}

func decode(t testing.TB, js []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	require.NoError(t, utiljson.Unmarshal(js, &obj))
	return obj
}

func deployment(t testing.TB, js []byte) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	require.NoError(t, json.Unmarshal(js, d))
	return d
}

func toJSON(t testing.TB, obj map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return b
}

func projectPatch(t testing.TB) []Op {
	t.Helper()
	ops, err := Parse(patchFile(t))
	require.NoError(t, err)
	return ops
}

// alone applies patch to obj by itself, as `kubectl patch --type=json`
// does.
func alone(t testing.TB, obj map[string]any, patch []Op) []byte {
	t.Helper()
	js, err := json.Marshal(patch)
	require.NoError(t, err)
	p, err := jsonpatch.DecodePatch(js)
	require.NoError(t, err)
	out, err := p.Apply(toJSON(t, obj))
	require.NoError(t, err)
	return out
}

// written is obj after the project's patch, as the API server stores it: a
// new resourceVersion.
func written(t testing.TB, obj map[string]any) map[string]any {
	t.Helper()
	p, err := Apply(obj, projectPatch(t))
	require.NoError(t, err)
	out, err := p.Preview(obj)
	require.NoError(t, err)
	w := decode(t, out)
	w["metadata"].(map[string]any)["resourceVersion"] = "1240"
	return w
}

// opsOf lists ops as "op path".
func opsOf(ops []Op) []string {
	var out []string
	for _, o := range ops {
		out = append(out, o.Op+" "+o.Path)
	}
	return out
}

func str(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// The first apply is the patch, with the original recorded in the same
// write: the spec is what the patch alone (kubectl patch) makes of it, and
// the annotation holds the template and strategy as they were.
func TestApplyFirst(t *testing.T) {
	obj, patch := fixture(t), projectPatch(t)
	before := deployment(t, toJSON(t, obj))
	p, err := Apply(obj, patch)
	require.NoError(t, err)
	assert.True(t, p.Records)
	assert.Equal(t, Op{Op: "test", Path: "/metadata/resourceVersion", Value: str("1234")}, p.Ops[0], "the read's resourceVersion, first")
	assert.Equal(t, patch, p.Ops[p.First:p.End])
	require.Len(t, p.Ops, len(patch)+2)
	last := p.Ops[len(p.Ops)-1]
	assert.Equal(t, "add", last.Op)
	assert.Equal(t, "/metadata/annotations", last.Path, "no annotations yet: the map is added")

	out, err := p.Preview(obj)
	require.NoError(t, err)
	d := deployment(t, out)
	assert.Equal(t, deployment(t, alone(t, obj, patch)).Spec, d.Spec, "the patch's spec")
	assert.Equal(t, "ghcr.io/mcmirror/coredns-mc:latest", d.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, int32(35), d.Spec.MinReadySeconds)
	assert.Equal(t, []string{Annotation}, slices.Collect(maps.Keys(d.Annotations)))

	orig, found, err := OriginalOf(decode(t, out))
	require.NoError(t, err)
	require.True(t, found)
	assert.ElementsMatch(t, []string{"template", "strategy"}, slices.Collect(maps.Keys(orig)), "no minReadySeconds: the fixture has none")
	var tmpl corev1.PodTemplateSpec
	require.NoError(t, json.Unmarshal(orig["template"], &tmpl))
	assert.Equal(t, before.Spec.Template, tmpl)
	var strategy appsv1.DeploymentStrategy
	require.NoError(t, json.Unmarshal(orig["strategy"], &strategy))
	assert.Equal(t, before.Spec.Strategy, strategy)

	// Applied locally, the plan does not change obj.
	assert.Equal(t, fixture(t), obj)
}

// Where the Deployment has annotations (the deployment controller's
// revision, in a real cluster), the annotation is added among them.
func TestApplyKeepsAnnotations(t *testing.T) {
	obj := fixture(t)
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{"deployment.kubernetes.io/revision": "1"}
	p, err := Apply(obj, projectPatch(t))
	require.NoError(t, err)
	last := p.Ops[len(p.Ops)-1]
	assert.Equal(t, "/metadata/annotations/mcmirror.dev~1dns-original", last.Path)
	out, err := p.Preview(obj)
	require.NoError(t, err)
	d := deployment(t, out)
	assert.Equal(t, "1", d.Annotations["deployment.kubernetes.io/revision"])
	assert.Contains(t, d.Annotations, Annotation)
}

// Applied again (a Helm upgrade), the patch goes onto the recorded
// original: the same patch writes the same spec, and a new patch's result
// owes nothing to the old one.
func TestApplyAgain(t *testing.T) {
	obj, patch := fixture(t), projectPatch(t)
	applied := written(t, obj)

	p, err := Apply(applied, patch)
	require.NoError(t, err)
	assert.False(t, p.Records, "the original is kept")
	assert.Equal(t, Op{Op: "test", Path: "/metadata/resourceVersion", Value: str("1240")}, p.Ops[0])
	assert.Equal(t, []string{"add /spec/template", "add /spec/strategy", "remove /spec/minReadySeconds"}, opsOf(p.Ops[1:p.First]))
	assert.Equal(t, patch, p.Ops[p.First:])
	again, err := p.Preview(applied)
	require.NoError(t, err)
	assert.True(t, SameSpec(toJSON(t, applied), again), "the same spec")
	assert.Equal(t, deployment(t, toJSON(t, applied)).Annotations, deployment(t, again).Annotations, "the same original")

	// The next version's patch: another image, and kubeadm's failure
	// threshold for readiness.
	text := string(patchFile(t))
	for _, r := range []struct{ old, new string }{
		{"value: ghcr.io/mcmirror/coredns-mc:latest", "value: ghcr.io/mcmirror/coredns-mc:v2"},
		{"- {op: add, path: /spec/template/spec/containers/0/readinessProbe/failureThreshold, value: 2}\n", ""},
	} {
		require.Equal(t, 1, strings.Count(text, r.old))
		text = strings.Replace(text, r.old, r.new, 1)
	}
	next, err := Parse([]byte(text))
	require.NoError(t, err)
	p, err = Apply(applied, next)
	require.NoError(t, err)
	out, err := p.Preview(applied)
	require.NoError(t, err)
	d := deployment(t, out)
	assert.Equal(t, deployment(t, alone(t, obj, next)).Spec, d.Spec, "what the new patch makes of the original")
	assert.Equal(t, "ghcr.io/mcmirror/coredns-mc:v2", d.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, int32(3), d.Spec.Template.Spec.Containers[0].ReadinessProbe.FailureThreshold, "kubeadm's again")
	assert.Equal(t, int32(1), d.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds)
}

// Revert puts the spec back exactly as it was, and removes the annotation
// and only it; without the annotation there is nothing to do.
func TestRevert(t *testing.T) {
	for _, annotations := range []map[string]any{nil, {"deployment.kubernetes.io/revision": "2"}} {
		obj := fixture(t)
		if annotations != nil {
			obj["metadata"].(map[string]any)["annotations"] = annotations
		}
		applied := written(t, obj)

		p, found, err := Revert(applied)
		require.NoError(t, err)
		require.True(t, found)
		assert.Equal(t, []string{"test /metadata/resourceVersion", "add /spec/template", "add /spec/strategy",
			"remove /spec/minReadySeconds", "remove /metadata/annotations/mcmirror.dev~1dns-original"}, opsOf(p.Ops))
		out, err := p.Preview(applied)
		require.NoError(t, err)
		assert.True(t, SameSpec(toJSON(t, obj), out), "the spec as it was")
		d := deployment(t, out)
		assert.Equal(t, deployment(t, toJSON(t, obj)).Spec, d.Spec)
		assert.NotContains(t, d.Annotations, Annotation)
		if annotations != nil {
			assert.Equal(t, map[string]string{"deployment.kubernetes.io/revision": "2"}, d.Annotations)
		}

		_, found, err = Revert(decode(t, out))
		require.NoError(t, err)
		assert.False(t, found, "reverted: nothing left to revert")
	}
}

// A field the original did not have is removed again, and one it had is
// put back.
func TestRevertAbsentFields(t *testing.T) {
	obj := fixture(t)
	spec := obj["spec"].(map[string]any)
	delete(spec, "strategy")
	spec["minReadySeconds"] = int64(5)
	applied := written(t, obj)
	assert.Equal(t, int64(35), applied["spec"].(map[string]any)["minReadySeconds"])

	p, _, err := Revert(applied)
	require.NoError(t, err)
	assert.Equal(t, Op{Op: "remove", Path: "/spec/strategy"}, p.Ops[2])
	assert.Equal(t, Op{Op: "add", Path: "/spec/minReadySeconds", Value: json.RawMessage("5")}, p.Ops[3])
	out, err := p.Preview(applied)
	require.NoError(t, err)
	assert.True(t, SameSpec(toJSON(t, obj), out))
}

// On a Deployment laid out otherwise, the preview names the test that
// fails, with what the Deployment has there.
func TestNotKubeadm(t *testing.T) {
	patch := projectPatch(t)
	ctr := func(obj map[string]any) map[string]any {
		return obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	}
	for _, c := range []struct {
		name   string
		change func(obj map[string]any)
		index  int
		found  string
		want   string
	}{
		{"volume mounted under another name", func(obj map[string]any) {
			ctr(obj)["volumeMounts"].([]any)[0].(map[string]any)["name"] = "coredns-config"
		}, 4, `"coredns-config"`, `/spec/template/spec/containers/0/volumeMounts/0/name is "coredns-config", where the patch tests for "config-volume"`},
		{"no liveness probe", func(obj map[string]any) {
			delete(ctr(obj), "livenessProbe")
		}, 7, "", `/spec/template/spec/containers/0/livenessProbe/httpGet/path is missing, where the patch tests for "/health"`},
		{"other args", func(obj map[string]any) {
			ctr(obj)["args"] = []any{"-conf", "/etc/coredns/Corefile", "-dns.port", "1053"}
		}, 3, `["-conf","/etc/coredns/Corefile","-dns.port","1053"]`, `/spec/template/spec/containers/0/args is ["-conf","/etc/coredns/Corefile","-dns.port","1053"], where the patch tests for ["-conf","/etc/coredns/Corefile"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := fixture(t)
			c.change(obj)
			p, err := Apply(obj, patch)
			require.NoError(t, err)
			_, err = p.Preview(obj)
			var oe *OpError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, c.index, oe.Index)
			assert.Equal(t, p.Ops[c.index], oe.Op)
			assert.Equal(t, c.found, string(oe.Found))
			assert.Equal(t, c.want, err.Error())
		})
	}

	// An operation that is not a test and does not apply.
	obj := fixture(t)
	p, err := Apply(obj, []Op{{Op: "replace", Path: "/spec/template/spec/volumes/1/name", Value: str("x")}})
	require.NoError(t, err)
	_, err = p.Preview(obj)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 1, oe.Index)
	assert.Contains(t, err.Error(), `replace /spec/template/spec/volumes/1/name "x": `)
}

// A plan made from a read that is no longer current fails whole, at its
// first operation.
func TestStaleRead(t *testing.T) {
	obj := fixture(t)
	p, err := Apply(obj, projectPatch(t))
	require.NoError(t, err)
	newer := fixture(t)
	newer["metadata"].(map[string]any)["resourceVersion"] = "1235"
	_, err = p.Preview(newer)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 0, oe.Index)
	assert.True(t, errors.Is(err, jsonpatch.ErrTestFailed))

	delete(newer["metadata"].(map[string]any), "resourceVersion")
	_, err = Apply(newer, projectPatch(t))
	assert.ErrorContains(t, err, "no metadata.resourceVersion")
}

// An annotation that is not what apply writes is not reverted to.
func TestOriginalOfRefuses(t *testing.T) {
	for _, value := range []string{
		"not JSON",
		`{"strategy":{}}`,
		`{"template":"x"}`,
		`{"template":{},"replicas":3}`,
	} {
		obj := fixture(t)
		obj["metadata"].(map[string]any)["annotations"] = map[string]any{Annotation: value}
		_, _, err := Revert(obj)
		assert.ErrorContains(t, err, "annotation mcmirror.dev/dns-original is not what dns apply writes", value)
		_, err = Apply(obj, projectPatch(t))
		assert.Error(t, err, value)
	}
}

package dnspatch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patchFile is the text of deploy/patches/coredns.yaml.
func patchFile(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "patches", "coredns.yaml"))
	require.NoError(t, err)
	return b
}

// The project's patch parses, as YAML and as the same operations in JSON,
// and what it changes is within what the annotation records.
func TestParseProjectPatch(t *testing.T) {
	ops, err := Parse(patchFile(t))
	require.NoError(t, err)
	tests := 0
	for _, o := range ops {
		if o.Op == "test" {
			tests++
		}
	}
	assert.Equal(t, 10, tests, "the patch's tests")
	assert.Equal(t, Op{Op: "test", Path: "/spec/template/spec/containers/0/livenessProbe/httpGet/port", Value: json.RawMessage("8080")}, ops[7])
	assert.Equal(t, Op{Op: "add", Path: "/spec/minReadySeconds", Value: json.RawMessage("35")}, ops[len(ops)-1])

	js, err := json.Marshal(ops)
	require.NoError(t, err)
	again, err := Parse(js)
	require.NoError(t, err)
	assert.Equal(t, ops, again, "the same patch, written as JSON")
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ patch, want string }{
		{``, "no operations"},
		{`[]`, "no operations"},
		{`{op: add, path: /spec/minReadySeconds, value: 1}`, "not a JSON patch"},
		{`- {op: add, path: /spec/minReadySeconds, valu: 1}`, `unknown field "valu"`},
		{`- {op: add, path: /spec/minReadySeconds, value: 1, value: 2}`, "neither JSON nor YAML"},
		{`- {op: merge, path: /spec/template, value: {}}`, `operation 1 (merge /spec/template {}): unknown op "merge"`},
		{`- {op: add, path: /spec/minReadySeconds}`, "add needs a value"},
		{`- {op: test, path: /spec/replicas}`, "test needs a value"},
		{`- {op: replace, path: spec/minReadySeconds, value: 1}`, `path: "spec/minReadySeconds" is not a JSON pointer`},
		{`- {op: replace, path: /spec/template/metadata/annotations/a~2b, value: x}`, "~ must be followed by 0 or 1"},
		{`- {op: copy, path: /spec/template/spec/nodeName}`, `from: "" is not a JSON pointer`},
		{`- {op: replace, path: /spec/replicas, value: 3}`, "changes /spec/replicas: a patch may change /spec/template, /spec/strategy and /spec/minReadySeconds only"},
		{`- {op: add, path: /spec/templates, value: {}}`, "changes /spec/templates"},
		{`- {op: add, path: /metadata/annotations/mcmirror.dev~1dns-original, value: "{}"}`, "changes /metadata/annotations/mcmirror.dev~1dns-original"},
		{`- {op: remove, path: /spec/progressDeadlineSeconds}`, "changes /spec/progressDeadlineSeconds"},
		{`- {op: move, from: /spec/paused, path: /spec/minReadySeconds}`, "removes /spec/paused"},
		{"- {op: test, path: /spec/replicas, value: 2}\n- {op: remove, path: /status}", "operation 2 (remove /status): changes /status"},
	} {
		_, err := Parse([]byte(c.patch))
		assert.ErrorContains(t, err, c.want, "%q", c.patch)
	}
	// Tests look anywhere; copies may read anywhere.
	_, err := Parse([]byte("- {op: test, path: /spec/replicas, value: 2}\n- {op: copy, from: /spec/replicas, path: /spec/template/metadata/labels/n}"))
	assert.NoError(t, err)
}

func TestLookup(t *testing.T) {
	doc := []byte(`{"a":{"b/c":[1,{"d~e":"x"}],"n":null},"big":12345678901234567890}`)
	for _, c := range []struct {
		pointer, want string
		found         bool
	}{
		{"", `{"a":{"b/c":[1,{"d~e":"x"}],"n":null},"big":12345678901234567890}`, true},
		{"/a/b~1c/0", `1`, true},
		{"/a/b~1c/1/d~0e", `"x"`, true},
		{"/a/n", `null`, true},
		{"/big", `12345678901234567890`, true},
		{"/a/b~1c/2", "", false},
		{"/a/b~1c/01", "", false},
		{"/a/b~1c/-1", "", false},
		{"/a/x", "", false},
		{"/a/n/x", "", false},
		{"a", "", false},
	} {
		got, found := Lookup(doc, c.pointer)
		assert.Equal(t, c.found, found, c.pointer)
		if c.found {
			assert.JSONEq(t, c.want, string(got), c.pointer)
			assert.Equal(t, c.want, string(got), "%s: numbers as they were", c.pointer)
		}
	}
}

// Whatever the input, Parse does not panic, and what it accepts changes
// only what the annotation records and applies to the Deployment without
// a panic.
func FuzzParse(f *testing.F) {
	// Short seeds: an input that finds new coverage is minimized, and the
	// whole project patch takes a minute of that.
	f.Add("- {op: test, path: /spec/template/spec/containers/0/name, value: coredns}\n" +
		"- {op: replace, path: /spec/template/spec/volumes/0/configMap/name, value: coredns-mcmirror}\n" +
		"- {op: add, path: /spec/strategy, value: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}}\n" +
		"- {op: add, path: /spec/minReadySeconds, value: 35}\n")
	f.Add(`[{"op":"move","from":"/spec/template/spec/containers/0","path":"/spec/template/spec/containers/1"}]`)
	f.Add("- {op: copy, from: /metadata/name, path: /spec/template/metadata/labels/n}")
	f.Add("- {op: remove, path: /spec/strategy/rollingUpdate}")
	obj := fixture(f)
	f.Fuzz(func(t *testing.T, text string) {
		ops, err := Parse([]byte(text))
		if err != nil {
			return
		}
		for _, o := range ops {
			if o.Op != "test" && !recorded(o.Path) || o.Op == "move" && !recorded(o.From) {
				t.Fatalf("accepted %s", o)
			}
		}
		p, err := Apply(obj, ops)
		require.NoError(t, err)
		if out, err := p.Preview(obj); err == nil && !strings.Contains(string(out), Annotation) {
			t.Fatalf("applied without the annotation: %s", out)
		}
	})
}

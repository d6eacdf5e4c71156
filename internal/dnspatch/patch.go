// Package dnspatch computes what `coredns-mc dns apply` and `coredns-mc dns
// revert` write to the cluster's CoreDNS Deployment, and where its rollout
// stands. Everything here is a function of the Deployment as the API server
// returns it and of the JSON patch (deploy/patches/coredns.yaml): the
// command reads and writes, this decides, and tests need no cluster.
//
// Each write is one RFC 6902 JSON patch, so that the API server applies all
// of it or none of it: its first operation tests metadata.resourceVersion
// (a write based on a stale read changes nothing), and the test operations
// of the patch file hold or nothing changes. The first apply records what a
// patch may change (spec.template, spec.strategy, spec.minReadySeconds) in
// the annotation mcmirror.dev/dns-original in that same write. Later applies
// (a Helm upgrade) restore the recorded original within the write, then
// apply the patch file to it: the result depends on the original and the
// patch only, never on what an earlier patch left, and the patch's tests
// check the original layout again. Revert restores the original and removes
// the annotation, in one write.
package dnspatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Op is one operation of an RFC 6902 JSON patch.
type Op struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}

func (o Op) String() string {
	s := o.Op + " " + o.Path
	if o.From != "" {
		s += " from " + o.From
	}
	if len(o.Value) > 0 {
		s += " " + short(o.Value)
	}
	return s
}

// fields are the members of the Deployment's spec that a patch may change,
// and that the annotation records: what revert puts back.
var fields = []string{"template", "strategy", "minReadySeconds"}

// Parse reads a JSON patch written as JSON or as YAML (as kubectl's
// --patch-file takes it) and checks it: known operations with what each
// needs, and none that changes anything but spec.template, spec.strategy
// and spec.minReadySeconds, which revert could not put back. Test
// operations may look anywhere.
func Parse(data []byte) ([]Op, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("neither JSON nor YAML: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var ops []Op
	if err := dec.Decode(&ops); err != nil {
		return nil, fmt.Errorf("not a JSON patch (a list of operations with op, path, from and value): %v", err)
	}
	if len(ops) == 0 {
		return nil, errors.New("no operations")
	}
	for i, o := range ops {
		if err := check(o); err != nil {
			return nil, fmt.Errorf("operation %d (%s): %v", i+1, o, err)
		}
	}
	return ops, nil
}

// check says what is wrong with one operation of a patch file.
func check(o Op) error {
	mutates := true
	switch o.Op {
	case "test":
		mutates = false
		fallthrough
	case "add", "replace":
		if len(o.Value) == 0 {
			return fmt.Errorf("%s needs a value", o.Op)
		}
	case "move", "copy":
		if err := checkPointer(o.From); err != nil {
			return fmt.Errorf("from: %v", err)
		}
	case "remove":
	default:
		return fmt.Errorf("unknown op %q (add, remove, replace, move, copy or test)", o.Op)
	}
	if err := checkPointer(o.Path); err != nil {
		return fmt.Errorf("path: %v", err)
	}
	if !mutates {
		return nil
	}
	if !recorded(o.Path) {
		return fmt.Errorf("changes %s: a patch may change /spec/template, /spec/strategy and /spec/minReadySeconds only, what dns revert puts back", o.Path)
	}
	if o.Op == "move" && !recorded(o.From) {
		return fmt.Errorf("removes %s: a patch may change /spec/template, /spec/strategy and /spec/minReadySeconds only, what dns revert puts back", o.From)
	}
	return nil
}

// recorded reports whether path is within one of the recorded fields.
func recorded(path string) bool {
	return slices.ContainsFunc(fields, func(f string) bool {
		p := "/spec/" + f
		return path == p || strings.HasPrefix(path, p+"/")
	})
}

// checkPointer checks the syntax of an RFC 6901 JSON pointer other than
// the whole document.
func checkPointer(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q is not a JSON pointer (/a/b)", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Errorf("%q: ~ must be followed by 0 or 1", p)
		}
	}
	return nil
}

// escape makes s one token of a JSON pointer.
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// short is a JSON value on one line, cut at 200 bytes.
func short(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		b.Reset()
		b.Write(v)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

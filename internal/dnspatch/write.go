package dnspatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// Annotation, on the Deployment, holds what the first apply found in the
// fields a patch may change, as a JSON object with the members template,
// strategy and minReadySeconds (each absent when the spec had none).
const Annotation = "mcmirror.dev/dns-original"

// Original is the value of Annotation: the recorded fields by name.
type Original map[string]json.RawMessage

// Plan is one write to the Deployment: the operations of one JSON patch.
type Plan struct {
	Ops []Op
	// Records is true when the write also records the original in the
	// annotation (the first apply); false when it restores the original
	// an earlier apply recorded (an upgrade, or revert).
	Records bool
	// First and End delimit, in Ops, the operations of the patch file:
	// a failure there is the patch's own.
	First, End int
}

// Apply plans the write of `dns apply`: patch applied to the Deployment
// obj (as the API server returns it, decoded from JSON) with its original
// recorded, or, when an earlier apply recorded it, to that original.
func Apply(obj map[string]any, patch []Op) (Plan, error) {
	pre, err := precondition(obj)
	if err != nil {
		return Plan{}, err
	}
	orig, found, err := OriginalOf(obj)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Ops: []Op{pre}}
	if found {
		p.Ops = append(p.Ops, restore(obj, orig)...)
	} else {
		p.Records = true
	}
	p.First = len(p.Ops)
	p.Ops = append(p.Ops, patch...)
	p.End = len(p.Ops)
	if p.Records {
		orig, err = record(obj)
		if err != nil {
			return Plan{}, err
		}
		rec, err := recordOp(obj, orig)
		if err != nil {
			return Plan{}, err
		}
		p.Ops = append(p.Ops, rec)
	}
	return p, nil
}

// Revert plans the write of `dns revert`: the recorded original put back
// and the annotation removed. found is false when the Deployment has no
// annotation: nothing to revert.
func Revert(obj map[string]any) (p Plan, found bool, err error) {
	pre, err := precondition(obj)
	if err != nil {
		return Plan{}, false, err
	}
	orig, found, err := OriginalOf(obj)
	if err != nil || !found {
		return Plan{}, found, err
	}
	p.Ops = append([]Op{pre}, restore(obj, orig)...)
	p.Ops = append(p.Ops, Op{Op: "remove", Path: "/metadata/annotations/" + escape(Annotation)})
	p.First, p.End = len(p.Ops), len(p.Ops)
	return p, true, nil
}

// precondition is the test of the resourceVersion read: a write planned
// from a stale read fails whole.
func precondition(obj map[string]any) (Op, error) {
	rv, _ := member(obj, "metadata", "resourceVersion").(string)
	if rv == "" {
		return Op{}, errors.New("the Deployment has no metadata.resourceVersion")
	}
	v, _ := json.Marshal(rv)
	return Op{Op: "test", Path: "/metadata/resourceVersion", Value: v}, nil
}

// OriginalOf reads the annotation of obj; found is false when there is none.
func OriginalOf(obj map[string]any) (orig Original, found bool, err error) {
	s, found := member(obj, "metadata", "annotations", Annotation).(string)
	if !found {
		return nil, false, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("annotation %s is not what dns apply writes (%s): it cannot be trusted to revert to", Annotation, why)
	}
	if err := json.Unmarshal([]byte(s), &orig); err != nil {
		return nil, true, bad(err.Error())
	}
	for k := range orig {
		if !slices.Contains(fields, k) {
			return nil, true, bad("member " + strconv.Quote(k))
		}
	}
	if t := orig["template"]; len(t) == 0 || t[0] != '{' {
		return nil, true, bad("no template")
	}
	return orig, true, nil
}

// record takes the fields a patch may change from obj.
func record(obj map[string]any) (Original, error) {
	spec, _ := member(obj, "spec").(map[string]any)
	if _, ok := spec["template"].(map[string]any); !ok {
		return nil, errors.New("the Deployment has no spec.template")
	}
	orig := Original{}
	for _, f := range fields {
		if v, ok := spec[f]; ok {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			orig[f] = raw
		}
	}
	return orig, nil
}

// recordOp adds the annotation holding orig, and the annotations map if
// obj has none (a JSON patch cannot add a member to a missing object).
func recordOp(obj map[string]any, orig Original) (Op, error) {
	text, err := json.Marshal(orig)
	if err != nil {
		return Op{}, err
	}
	if _, ok := member(obj, "metadata", "annotations").(map[string]any); ok {
		v, _ := json.Marshal(string(text))
		return Op{Op: "add", Path: "/metadata/annotations/" + escape(Annotation), Value: v}, nil
	}
	v, _ := json.Marshal(map[string]string{Annotation: string(text)})
	return Op{Op: "add", Path: "/metadata/annotations", Value: v}, nil
}

// restore puts the recorded fields back: add replaces a member that is
// there and adds one that is not; one the original lacked is removed.
func restore(obj map[string]any, orig Original) []Op {
	spec, _ := member(obj, "spec").(map[string]any)
	var ops []Op
	for _, f := range fields {
		if v, ok := orig[f]; ok {
			ops = append(ops, Op{Op: "add", Path: "/spec/" + f, Value: v})
		} else if _, ok := spec[f]; ok {
			ops = append(ops, Op{Op: "remove", Path: "/spec/" + f})
		}
	}
	return ops
}

// Marshal is the body of the PATCH request.
func (p Plan) Marshal() []byte {
	b, err := json.Marshal(p.Ops)
	if err != nil {
		panic(err) // RawMessage values that are not JSON: a bug here
	}
	return b
}

// OpError is an operation of a plan that does not apply to the Deployment:
// the API server, which applies the same JSON patch the same way (with the
// same library), would refuse the whole write and say only "the server
// rejected our request due to an error in our request".
type OpError struct {
	// Index is the operation's, in Plan.Ops.
	Index int
	Op    Op
	// Found is the value at Op.Path before the operation; nil when there
	// is none.
	Found json.RawMessage
	Err   error
}

func (e *OpError) Error() string {
	if e.Op.Op != "test" {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	if e.Found == nil {
		return fmt.Sprintf("%s is missing, where the patch tests for %s", e.Op.Path, short(e.Op.Value))
	}
	return fmt.Sprintf("%s is %s, where the patch tests for %s", e.Op.Path, short(e.Found), short(e.Op.Value))
}

func (e *OpError) Unwrap() error { return e.Err }

// Preview applies the plan to obj as the API server will, one operation
// at a time so that a failure names its operation, and returns the result
// as JSON.
func (p Plan) Preview(obj map[string]any) ([]byte, error) {
	doc, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	for i, o := range p.Ops {
		one, err := json.Marshal([]Op{o})
		if err != nil {
			return nil, err
		}
		patch, err := jsonpatch.DecodePatch(one)
		if err != nil {
			return nil, &OpError{Index: i, Op: o, Err: err}
		}
		out, err := patch.Apply(doc)
		if err != nil {
			found, _ := Lookup(doc, o.Path)
			return nil, &OpError{Index: i, Op: o, Found: found, Err: err}
		}
		doc = out
	}
	return doc, nil
}

// SameSpec reports whether two Deployments, as JSON, have the same spec.
func SameSpec(a, b []byte) bool {
	var x, y struct {
		Spec any `json:"spec"`
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x.Spec, y.Spec)
}

// Lookup returns the value at an RFC 6901 pointer of the JSON document doc.
func Lookup(doc []byte, pointer string) (json.RawMessage, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil, false
	}
	if pointer != "" {
		if !strings.HasPrefix(pointer, "/") {
			return nil, false
		}
		for _, tok := range strings.Split(pointer[1:], "/") {
			tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
			switch c := v.(type) {
			case map[string]any:
				var ok bool
				if v, ok = c[tok]; !ok {
					return nil, false
				}
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != tok {
					return nil, false
				}
				v = c[i]
			default:
				return nil, false
			}
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return raw, true
}

// member returns obj[keys[0]][keys[1]]..., nil when any is missing.
func member(obj map[string]any, keys ...string) any {
	var v any = obj
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

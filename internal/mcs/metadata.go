package mcs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Metadata is what a ServiceExport exports beside its Service: its
// spec.exportedLabels and spec.exportedAnnotations, which the
// specification ("Labels and Annotations") has every importing cluster
// put on its ServiceImport. Its JSON form is what the exporting cluster
// stamps on the Service (labels.ServiceExportMetadata).
type Metadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// MaxMetadataBytes bounds the JSON form of what one export carries: it
// rides in an annotation of the exported Service and lands in the
// ServiceImport's, and the API server allows 256 KiB for all of an
// object's annotations together. A quarter leaves the rest of both
// objects' annotations room.
const MaxMetadataBytes = 64 << 10

// Empty reports whether m exports nothing.
func (m Metadata) Empty() bool { return len(m.Labels) == 0 && len(m.Annotations) == 0 }

// Equal reports whether m and o export the same name/value pairs.
func (m Metadata) Equal(o Metadata) bool {
	return maps.Equal(m.Labels, o.Labels) && maps.Equal(m.Annotations, o.Annotations)
}

// Encode is m's JSON form, the same for the same pairs (encoding/json
// sorts map keys); "{}" for none.
func (m Metadata) Encode() string {
	b, err := json.Marshal(m)
	if err != nil { // maps of strings always encode
		panic(err)
	}
	return string(b)
}

// DecodeMetadata reads the JSON form Encode writes.
func DecodeMetadata(s string) (Metadata, error) {
	var m Metadata
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return Metadata{}, fmt.Errorf("annotation %s is not the JSON mcmirror writes: %w", labels.ServiceExportMetadata, err)
	}
	return m, nil
}

// ScreenMetadata is the part of m that an import may carry, and a
// sentence for each key it leaves out, in key order. Left out:
//
//   - a key of mcmirror.dev or multicluster.kubernetes.io, or of one of
//     their subdomains: the keys the controller and the specification
//     give a ServiceImport (its owner label, its derived Service
//     annotation), which an exporting namespace must not set in other
//     clusters;
//   - a key that is not a qualified name, or a label value that is not
//     a label value: the API server would refuse the whole ServiceImport;
//   - everything, when the JSON form of the rest is over
//     MaxMetadataBytes.
//
// The exporting cluster screens what its ServiceExport asks for, and
// every importing cluster screens again what it reads from a linked
// cluster, whose controller may be another release or not mcmirror's.
func ScreenMetadata(m Metadata) (Metadata, []string) {
	var out Metadata
	var refused []string
	out.Labels, refused = screen("exportedLabels", m.Labels, validation.IsValidLabelValue, refused)
	out.Annotations, refused = screen("exportedAnnotations", m.Annotations, nil, refused)
	if n := len(out.Encode()); n > MaxMetadataBytes {
		refused = append(refused, fmt.Sprintf("all of exportedLabels and exportedAnnotations: %d bytes of JSON, over the %d allowed", n, MaxMetadataBytes))
		return Metadata{}, refused
	}
	return out, refused
}

// screen keeps the pairs of kv whose key is not reserved and valid, and
// whose value value accepts (nil: any).
func screen(field string, kv map[string]string, value func(string) []string, refused []string) (map[string]string, []string) {
	var out map[string]string
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		v := kv[k]
		var why string
		if reservedKey(k) {
			why = "reserved to the implementation"
		} else if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			why = "not a valid key: " + strings.Join(errs, "; ")
		} else if value != nil {
			if errs := value(v); len(errs) > 0 {
				why = fmt.Sprintf("value %q is not valid: %s", shorten(v), strings.Join(errs, "; "))
			}
		}
		if why != "" {
			refused = append(refused, fmt.Sprintf("%s %q: %s", field, shorten(k), why))
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, refused
}

// shorten is s for a message: its first 64 bytes, and "..." when there
// are more (a key or value that is not valid may be of any length).
func shorten(s string) string {
	if len(s) <= 64 {
		return s
	}
	return strings.ToValidUTF8(s[:64], "") + "..."
}

// reservedDomains are the domains whose keys, theirs and their
// subdomains', no export may set on a ServiceImport.
var reservedDomains = []string{labels.Domain, "multicluster.kubernetes.io"}

// reservedKey reports whether k's prefix is a reserved domain or one of
// its subdomains.
func reservedKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	if !ok {
		return false
	}
	prefix = strings.ToLower(prefix)
	for _, d := range reservedDomains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// metadataString is one side of m (labels or annotations) for a conflict
// message and its comparison: its JSON (keys in order), or "none".
func metadataString(kv map[string]string) string {
	if len(kv) == 0 {
		return "none"
	}
	b, err := json.Marshal(kv)
	if err != nil { // a map of strings always encodes
		panic(err)
	}
	return string(b)
}

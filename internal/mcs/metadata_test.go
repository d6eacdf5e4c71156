package mcs

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

func TestScreenMetadata(t *testing.T) {
	in := Metadata{
		Labels: map[string]string{
			"dummy-label":                             "true",
			"team.example.com/owner":                  "shop",
			"mcmirror.dev/managed-by":                 "someone",
			"serviceexport.mcmirror.dev/mode":         "flat",
			"multicluster.kubernetes.io/service-name": "other",
			"bad key!":   "x",
			"long-value": strings.Repeat("v", 64),
		},
		Annotations: map[string]string{
			"dummy-annotation":                           "a value with spaces, fine for an annotation",
			"multicluster.kubernetes.io/derived-service": "derived-elsewhere",
			"MCMIRROR.DEV/egress-ports":                  "80/TCP=30000",
		},
	}
	got, refused := ScreenMetadata(in)
	assert.Equal(t, Metadata{
		Labels:      map[string]string{"dummy-label": "true", "team.example.com/owner": "shop"},
		Annotations: map[string]string{"dummy-annotation": "a value with spaces, fine for an annotation"},
	}, got)
	require.Len(t, refused, 7)
	joined := strings.Join(refused, "\n")
	for _, want := range []string{
		`exportedLabels "mcmirror.dev/managed-by": reserved`,
		`exportedLabels "serviceexport.mcmirror.dev/mode": reserved`,
		`exportedLabels "multicluster.kubernetes.io/service-name": reserved`,
		`exportedLabels "bad key!": not a valid key`,
		`exportedLabels "long-value": value`,
		`exportedAnnotations "multicluster.kubernetes.io/derived-service": reserved`,
		`exportedAnnotations "MCMIRROR.DEV/egress-ports": reserved`,
	} {
		assert.Contains(t, joined, want)
	}

	none, refused := ScreenMetadata(Metadata{})
	assert.True(t, none.Empty())
	assert.Empty(t, refused)
}

// Over MaxMetadataBytes nothing is exported: a part would be arbitrary.
func TestScreenMetadataTooLarge(t *testing.T) {
	big := Metadata{Labels: map[string]string{"small": "yes"}, Annotations: map[string]string{"big": strings.Repeat("x", MaxMetadataBytes)}}
	got, refused := ScreenMetadata(big)
	assert.True(t, got.Empty(), "%+v", got)
	require.Len(t, refused, 1)
	assert.Contains(t, refused[0], "over the 65536 allowed")
}

// A key or value of any length is shown shortened.
func TestScreenMetadataShortensMessages(t *testing.T) {
	_, refused := ScreenMetadata(Metadata{Labels: map[string]string{strings.Repeat("k", 5000) + "!": strings.Repeat("v", 5000)}})
	require.Len(t, refused, 1)
	assert.Less(t, len(refused[0]), 1000, refused[0])
}

func TestMetadataEncoding(t *testing.T) {
	assert.Equal(t, "{}", Metadata{}.Encode())
	m := Metadata{Labels: map[string]string{"b": "2", "a": "1"}, Annotations: map[string]string{"note": `say "hi"`}}
	assert.Equal(t, `{"labels":{"a":"1","b":"2"},"annotations":{"note":"say \"hi\""}}`, m.Encode(), "keys in order: the same pairs, the same text")
	back, err := DecodeMetadata(m.Encode())
	require.NoError(t, err)
	assert.True(t, back.Equal(m))
	_, err = DecodeMetadata("labels: a=1")
	assert.ErrorContains(t, err, "serviceexport.mcmirror.dev/exported-metadata")
}

// The exported labels and the exported annotations are each a set decided
// whole by the precedence, and a set that differs is a conflict, labels and
// annotations apart (KEP-1645, "Labels and Annotations"; the conformance
// suite's spec "should apply the conflict resolution policy and report a
// Conflict condition on each ServiceExport").
func TestMergeMetadata(t *testing.T) {
	first := Metadata{Labels: map[string]string{"dummy-label": "true"}, Annotations: map[string]string{"dummy-annotation": "true"}}
	second := Metadata{Labels: map[string]string{"dummy-label2": "true"}, Annotations: map[string]string{"dummy-annotation2": "true"}}
	m := Merge([]Export{
		{Cluster: "west", Created: t0.Add(time.Second), Service: svc(nil), Metadata: second},
		{Cluster: "east", Created: t0, Service: svc(nil), Metadata: first},
	})
	assert.Equal(t, first, m.Metadata, "the oldest export's, whole")
	assert.Equal(t, []mcsv1alpha1.ServiceExportConditionReason{
		mcsv1alpha1.ServiceExportReasonLabelsConflict, mcsv1alpha1.ServiceExportReasonAnnotationsConflict,
	}, reasons(m))
	assert.Equal(t, `the exports disagree on exported labels: {"dummy-label":"true"} in east; {"dummy-label2":"true"} in west; `+
		`{"dummy-label":"true"} applies, the oldest export's (east)`, m.Conflicts[0].Message)

	// A superset is not the same set: the oldest export's still applies.
	more := Metadata{Labels: map[string]string{"dummy-label": "true", "extra": "1"}, Annotations: first.Annotations}
	m = Merge([]Export{{Cluster: "east", Created: t0, Service: svc(nil), Metadata: first}, {Cluster: "west", Created: t0.Add(time.Second), Service: svc(nil), Metadata: more}})
	assert.Equal(t, first, m.Metadata)
	assert.Equal(t, []mcsv1alpha1.ServiceExportConditionReason{mcsv1alpha1.ServiceExportReasonLabelsConflict}, reasons(m))

	// None against some is a conflict too (an export by Linkerd's label
	// exports none).
	m = Merge([]Export{{Cluster: "east", Created: t0, Service: svc(nil)}, {Cluster: "west", Created: t0.Add(time.Second), Service: svc(nil), Metadata: first}})
	assert.True(t, m.Metadata.Empty())
	assert.Len(t, m.Conflicts, 2)
	assert.Contains(t, m.Conflicts[0].Message, "none in east")

	// The same pairs: no conflict.
	m = Merge([]Export{{Cluster: "east", Created: t0, Service: svc(nil), Metadata: first}, {Cluster: "west", Created: t0.Add(time.Second), Service: svc(nil), Metadata: first}})
	assert.Empty(t, m.Conflicts)
	assert.Equal(t, first, m.Metadata)

	// The merged sets are copies: the import may not change an export's.
	m.Metadata.Labels["changed"] = "yes"
	assert.NotContains(t, first.Labels, "changed")
}

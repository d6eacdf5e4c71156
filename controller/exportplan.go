package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The export side of the Multi-Cluster Services API: a ServiceExport in
// this cluster makes its Service exported. The controller marks the Service
// with the stamp (labels.ServiceExportMode, labels.ServiceExportCreated and
// labels.ServiceExportMetadata), which every linked cluster's readers
// select beside Linkerd's label, and
// writes the conditions the specification defines on the ServiceExport.
// The stamp is the controller's alone: one it did not write (by hand, on a
// Service without a ServiceExport, or a changed time) is taken away or set
// back. This file is the computation; exportapply.go does the writes.

// stamp is the mark an export puts on its Service. The zero stamp is none.
type stamp struct {
	mode    string // labels.ModeGateway or labels.ModeFlat
	created string // the ServiceExport's creation time, RFC 3339
	// metadata is what the ServiceExport exports beside the Service
	// (exportedLabels, exportedAnnotations), screened, in its JSON form
	// (mcs.Metadata.Encode): "{}" for none.
	metadata string
}

// Reasons of the Valid condition beyond the specification's.
const (
	// reasonInvalidMode: the ServiceExport's mcmirror.dev/mode annotation
	// is neither gateway nor flat.
	reasonInvalidMode = "InvalidMode"
	// reasonMirrorService: the Service is itself a mirror of a remote
	// one, which would be exported back to where it came from.
	reasonMirrorService = "MirrorService"
	// reasonDerivedService: the Service is the derived Service of a
	// ServiceImport, which would be imported again elsewhere as another.
	reasonDerivedService = "DerivedService"
)

// exportInput is what the sync of one namespace/name reads.
type exportInput struct {
	// cluster is this cluster's ID.
	cluster string
	// export is the ServiceExport; nil when there is none.
	export *mcsv1beta1.ServiceExport
	// service is the local Service of the same name; nil when none.
	service *corev1.Service
	// owned is the stamp the controller owns on the Service now (from
	// its managed fields): what an unexport removes.
	owned stamp
	// defaultMode is the mode of an export whose ServiceExport does not
	// name one (--service-export-mode).
	defaultMode string
	// peers are the exports of the same namespace/name by the linked
	// clusters, for the Conflict condition.
	peers []mcs.Export
}

// exportPlan is what should be.
type exportPlan struct {
	// stamp is the stamp the Service should carry; zero to carry none.
	stamp stamp
	// writeStamp is set when the Service exists and stamp differs from
	// what the controller owns on it, or when no stamp is wanted and the
	// Service carries one, whoever wrote it.
	writeStamp bool
	// foreign is the stamp the Service carries when the controller did
	// not write it and it is not the one wanted (someone else's: set by
	// hand, or a time changed): refused, with an Event. Zero otherwise.
	foreign stamp
	// conditions are the ServiceExport's conditions; nil without one.
	conditions []metav1.Condition
	// refusedMetadata says, a sentence each, what of the ServiceExport's
	// exportedLabels and exportedAnnotations is not exported
	// (mcs.ScreenMetadata); the Valid condition's message says it too.
	refusedMetadata []string
}

// planExport computes what one namespace/name should look like. The Ready
// condition counts the Service as published once the controller owns the
// wanted stamp on it: exportapply.go plans again after writing the stamp.
func planExport(in exportInput) exportPlan {
	var p exportPlan
	if in.export == nil {
		p.writeStamp, p.foreign = stampChange(in, p.stamp)
		return p
	}
	valid := mcs.Valid(in.service)
	mode := in.defaultMode
	if v, ok := in.export.Annotations[labels.ModeLabel]; ok {
		mode = v
	}
	switch {
	case valid.Status != metav1.ConditionTrue:
	case in.service.Labels[labels.MirroredService] != "":
		valid.Status, valid.Reason = metav1.ConditionFalse, reasonMirrorService
		valid.Message = "the Service is a mirror of a remote Service; export it in its own cluster"
	case in.service.Labels[labels.ServiceImport] != "" && in.service.Labels[labels.ManagedBy] == labels.ManagedByValue:
		valid.Status, valid.Reason = metav1.ConditionFalse, reasonDerivedService
		valid.Message = fmt.Sprintf("the Service is the derived Service of ServiceImport %s; export Service %s in the clusters that have it",
			in.service.Labels[labels.ServiceImport], in.service.Labels[labels.ServiceImport])
	case mode != labels.ModeGateway && mode != labels.ModeFlat:
		valid.Status, valid.Reason = metav1.ConditionFalse, reasonInvalidMode
		valid.Message = fmt.Sprintf("annotation %s is %q; want %q or %q", labels.ModeLabel, mode, labels.ModeGateway, labels.ModeFlat)
	}
	var meta mcs.Metadata
	if valid.Status == metav1.ConditionTrue {
		meta, p.refusedMetadata = mcs.ScreenMetadata(mcs.Metadata{
			Labels: in.export.Spec.ExportedLabels, Annotations: in.export.Spec.ExportedAnnotations,
		})
		p.stamp = stamp{mode: mode, created: in.export.CreationTimestamp.UTC().Format(time.RFC3339), metadata: meta.Encode()}
		if len(p.refusedMetadata) > 0 {
			valid.Message += "; not exported to the ServiceImports: " + refusedSummary(p.refusedMetadata)
		}
	}
	p.writeStamp, p.foreign = stampChange(in, p.stamp)
	p.conditions = []metav1.Condition{valid, mcs.Ready(valid, p.stamp != stamp{} && p.stamp == in.owned)}
	if valid.Status == metav1.ConditionTrue {
		own := mcs.Export{Cluster: in.cluster, Created: exportTime(in.service, in.export.CreationTimestamp.Time), Service: in.service, Metadata: meta}
		exports := append([]mcs.Export{own}, in.peers...)
		p.conditions = append(p.conditions, mcs.ConflictCondition(mcs.Merge(exports)))
	}
	return p
}

// maxRefusedShown bounds the sentences refusedSummary shows: a
// condition's message holds 32 KiB at most.
const maxRefusedShown = 10

// refusedSummary is what refused says, the first maxRefusedShown
// sentences and how many more.
func refusedSummary(refused []string) string {
	if len(refused) <= maxRefusedShown {
		return strings.Join(refused, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(refused[:maxRefusedShown], "; "), len(refused)-maxRefusedShown)
}

// stampChange reports whether the stamp on in.service must be written to
// become want, and the stamp it carries if that is someone else's. With a
// stamp wanted, the controller's own must be it; with none, the Service
// must carry none at all, whoever wrote it: the stamp exports the Service
// to every linked cluster, and only a ServiceExport may.
func stampChange(in exportInput, want stamp) (write bool, foreign stamp) {
	if in.service == nil {
		return false, stamp{}
	}
	carried := stampOf(in.service.Labels, in.service.Annotations) // whoever wrote it
	if carried != (stamp{}) && carried != in.owned && carried != want {
		foreign = carried
	}
	if want == (stamp{}) {
		return carried != (stamp{}) || in.owned != (stamp{}), foreign
	}
	return want != in.owned, foreign
}

// stampOf is the stamp that the labels l and annotations a carry.
func stampOf(l, a map[string]string) stamp {
	return stamp{mode: l[labels.ServiceExportMode], created: a[labels.ServiceExportCreated], metadata: a[labels.ServiceExportMetadata]}
}

// exportTime is when an export of svc began, for the specification's
// precedence (the oldest export wins): recorded, the creation time of its
// ServiceExport, but never before the Service's own creationTimestamp,
// which the API server sets and no one can write. Zero recorded is the
// Service's creation.
func exportTime(svc *corev1.Service, recorded time.Time) time.Time {
	if created := svc.CreationTimestamp.Time; recorded.Before(created) {
		return created
	}
	return recorded
}

// peerExport is a cluster's export of a Service as this cluster reads it.
// Its time is the ServiceExport's creation that the stamp records
// (exportTime: never before the Service's creation), and the Service's own
// creation when it carries no stamp (exported by Linkerd's label alone): a
// time annotation without the stamp is no one's, and is not believed. Its
// exported labels and annotations are the stamp's, screened again here
// (mcs.ScreenMetadata: the exporting cluster's controller may be another
// release's, or not mcmirror's); none without the stamp, or when the
// stamp's are not the JSON mcmirror writes.
func peerExport(cluster string, svc *corev1.Service) mcs.Export {
	e := mcs.Export{Cluster: cluster, Service: svc}
	var recorded time.Time
	if m := svc.Labels[labels.ServiceExportMode]; m == labels.ModeGateway || m == labels.ModeFlat {
		if t, err := time.Parse(time.RFC3339, svc.Annotations[labels.ServiceExportCreated]); err == nil {
			recorded = t
		}
		if v, ok := svc.Annotations[labels.ServiceExportMetadata]; ok {
			if meta, err := mcs.DecodeMetadata(v); err == nil {
				e.Metadata, _ = mcs.ScreenMetadata(meta)
			}
		}
	}
	e.Created = exportTime(svc, recorded)
	return e
}

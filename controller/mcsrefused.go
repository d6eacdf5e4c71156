package controller

// Refusals of the Multi-Cluster Services side: what a tenant may not
// decide for other namespaces or clusters. Each is a warning Event on the
// object concerned and a count in mcs_refused_total.

import (
	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

const (
	// ReasonServiceExportInvalid: a ServiceExport is not valid (its
	// Valid condition is False, with the reason in the message): nothing
	// is exported. Recorded on the ServiceExport when it becomes invalid,
	// or invalid for another reason.
	ReasonServiceExportInvalid = "ServiceExportInvalid"

	// ReasonStampRefused: a Service carries the ServiceExport stamp
	// (serviceexport.mcmirror.dev/mode, /created, /exported-metadata), or
	// part of it, that
	// the controller did not write and would not: by hand on a Service
	// no ServiceExport exports (which would export it to every linked
	// cluster, bypassing whoever may create ServiceExports), or a time
	// changed (which would win the oldest-export precedence), or exported
	// labels or annotations its ServiceExport does not export. The
	// controller removes it, or sets it back. Recorded on the Service.
	ReasonStampRefused = "ServiceExportStampRefused"

	// ReasonDerivedServiceTaken: the name of an import's derived Service
	// is held by the derived Service of another import. That Service and
	// its EndpointSlices are left alone, and the import is not written.
	// Recorded on the Service that holds the name.
	ReasonDerivedServiceTaken = "DerivedServiceTaken"

	// ReasonExportedMetadataRefused: a ServiceExport's exportedLabels or
	// exportedAnnotations hold keys no import may carry (reserved to the
	// implementation, or not valid), or more than mcs.MaxMetadataBytes:
	// those are left out, the rest is exported. Recorded on the
	// ServiceExport each time what is left out changes; its Valid
	// condition's message says it too.
	ReasonExportedMetadataRefused = "ExportedMetadataRefused"
)

// mcsRefusedReasons are the reasons mcs_refused_total counts: those of
// the Valid condition of a ServiceExport that is not valid, and the Event
// reasons of the other refusals.
var mcsRefusedReasons = []string{
	string(mcsv1beta1.ServiceExportReasonNoService), string(mcsv1beta1.ServiceExportReasonInvalidServiceType),
	reasonInvalidMode, reasonMirrorService, reasonDerivedService,
	ReasonStampRefused, ReasonDerivedServiceTaken, ReasonExportedMetadataRefused,
}

// mcsRefusedTotal: every reason starts at zero.
var mcsRefusedTotal = withReasons(metrics.Counter("mcs_refused_total",
	"Refusals of the Multi-Cluster Services side, by reason: a ServiceExport that became invalid (its Valid reason: "+
		"NoService, InvalidServiceType, InvalidMode, MirrorService, DerivedService), a ServiceExport stamp the controller "+
		"did not write (ServiceExportStampRefused), a derived Service's name held by another import (DerivedServiceTaken), "+
		"exported labels or annotations of a ServiceExport left out (ExportedMetadataRefused).", "reason"),
	mcsRefusedReasons...)

// exportRefused records, once the conditions were written, a ServiceExport
// that became invalid or is invalid for another reason now.
func (c *Controller) exportRefused(se *mcsv1beta1.ServiceExport, conds []metav1.Condition) {
	valid := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionValid))
	if valid == nil || valid.Status != metav1.ConditionFalse {
		return
	}
	if was := meta.FindStatusCondition(se.Status.Conditions, valid.Type); was != nil && was.Status == valid.Status && was.Reason == valid.Reason {
		return
	}
	mcsRefusedTotal.WithLabelValues(valid.Reason).Inc()
	c.recorder.Eventf(mcsRef("ServiceExport", se), corev1.EventTypeWarning, ReasonServiceExportInvalid,
		"ServiceExport not valid (%s): %s", valid.Reason, valid.Message)
}

// exportMetadataRefused records, once the conditions were written, what of
// se's exported labels and annotations is left out (refused, non-empty),
// when that changed: the Valid condition's message says what is left out,
// so a change of it is a change of the message.
func (c *Controller) exportMetadataRefused(se *mcsv1beta1.ServiceExport, conds []metav1.Condition, refused []string) {
	valid := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionValid))
	if len(refused) == 0 || valid == nil {
		return
	}
	if was := meta.FindStatusCondition(se.Status.Conditions, valid.Type); was != nil && was.Message == valid.Message {
		return
	}
	mcsRefusedTotal.WithLabelValues(ReasonExportedMetadataRefused).Inc()
	c.recorder.Eventf(mcsRef("ServiceExport", se), corev1.EventTypeWarning, ReasonExportedMetadataRefused,
		"Not exported to the ServiceImports of the clusterset (the rest is): %s", refusedSummary(refused))
}

// mcsRef is the reference of an Event on o, of the MCS API's kind: the
// recorder's scheme (client-go's) does not know those kinds.
func mcsRef(kind string, o metav1.Object) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: mcsv1beta1.SchemeGroupVersion.String(), Kind: kind,
		Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion()}
}

// stampRefused records a stamp on svc that the controller did not write,
// which it replaced by want (none: removed).
func (c *Controller) stampRefused(svc *corev1.Service, foreign, want stamp) {
	mcsRefusedTotal.WithLabelValues(ReasonStampRefused).Inc()
	carried := "label " + labels.ServiceExportMode + "=" + foreign.mode + ", annotation " + labels.ServiceExportCreated + "=" + foreign.created +
		", annotation " + labels.ServiceExportMetadata + "=" + foreign.metadata
	if want == (stamp{}) {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonStampRefused,
			"The ServiceExport stamp (%s) was not written by mcmirror and no valid ServiceExport %s/%s exports the Service: removed; create a ServiceExport to export it",
			carried, svc.Namespace, svc.Name)
		return
	}
	c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonStampRefused,
		"The ServiceExport stamp (%s) was not written by mcmirror: set back to the ServiceExport's (mode %s, created %s, exported metadata %s)",
		carried, want.mode, want.created, want.metadata)
}

// derivedTaken records that the name of the derived Service of ServiceImport
// name is held by held, the derived Service of another import.
func (c *Controller) derivedTaken(held *corev1.Service, name string) {
	mcsRefusedTotal.WithLabelValues(ReasonDerivedServiceTaken).Inc()
	conflictsTotal.WithLabelValues("services").Inc()
	c.recorder.Eventf(held, corev1.EventTypeWarning, ReasonDerivedServiceTaken,
		"Service %s/%s is the derived Service of ServiceImport %s and holds the name of ServiceImport %s's: it is left alone and %s is not imported",
		held.Namespace, held.Name, held.Labels[labels.ServiceImport], name, name)
}

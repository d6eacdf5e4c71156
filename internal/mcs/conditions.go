package mcs

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Valid says whether a ServiceExport's Service can be exported: it exists
// (svc non-nil) and is not of type ExternalName, which has no endpoints to
// reach. The condition has no transition time; Apply sets it.
func Valid(svc *corev1.Service) metav1.Condition {
	c := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionValid)}
	switch {
	case svc == nil:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoService)
		c.Message = "there is no Service of this name in this namespace"
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonInvalidServiceType)
		c.Message = "a Service of type ExternalName cannot be exported"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid)
		c.Message = "the Service can be exported"
	}
	return c
}

// Ready is the Ready condition of a ServiceExport, from its Valid condition
// and whether its Service is published. mcmirror is pull-model: once the
// controller has marked the Service, the linked clusters see it and pull
// it, so published means the export is visible to them, and Ready is True
// with the module's pull-model reason, Ready. Before that it is Unknown and
// Pending; an export that is not valid is False and Failed, whatever
// published says, and the message carries the Valid condition's.
func Ready(valid metav1.Condition, published bool) metav1.Condition {
	c := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionReady)}
	switch {
	case valid.Status == metav1.ConditionFalse:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed)
		c.Message = fmt.Sprintf("the Service is not exported: %s (condition Valid, reason %s)", valid.Message, valid.Reason)
	case valid.Status != metav1.ConditionTrue || !published:
		c.Status, c.Reason = metav1.ConditionUnknown, string(mcsv1beta1.ServiceExportReasonPending)
		c.Message = "waiting for the mcmirror controller to publish the Service to the linked clusters; " +
			"if this lasts, see the controller's Events and log"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonReady)
		c.Message = "the Service is published: the linked clusters can import it"
	}
	return c
}

// ConflictCondition is the Conflict condition of every export that m
// merged: the specification sets it on all of them alike. With more than one
// conflict its reason is the first's and its message names them all.
func ConflictCondition(m Merged) metav1.Condition {
	c := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionConflict)}
	if len(m.Conflicts) == 0 {
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoConflicts)
		c.Message = fmt.Sprintf("the exports of %s agree", strings.Join(m.Clusters, ", "))
		return c
	}
	msgs := make([]string, len(m.Conflicts))
	for i, x := range m.Conflicts {
		msgs[i] = x.Message
	}
	c.Status, c.Reason = metav1.ConditionTrue, string(m.Conflicts[0].Reason)
	c.Message = strings.Join(msgs, "\n")
	return c
}

// Apply sets each of desired in conditions, for an object of generation
// gen, and reports whether anything changed. A condition keeps its
// transition time unless its status changes (meta.SetStatusCondition), so
// applying the same conditions again changes nothing and needs no write.
func Apply(conditions []metav1.Condition, gen int64, desired ...metav1.Condition) ([]metav1.Condition, bool) {
	out := slices.Clone(conditions)
	changed := false
	for _, d := range desired {
		d.ObservedGeneration = gen
		changed = meta.SetStatusCondition(&out, d) || changed
	}
	return out, changed
}

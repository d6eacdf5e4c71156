package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The exported labels and annotations of a ServiceImport: those of the
// export that takes precedence (mcs.Merge), which its ServiceExport's
// exportedLabels and exportedAnnotations name and the stamp carries
// (labels.ServiceExportMetadata). The controller writes them by
// server-side apply, as ImportFieldManager, and so owns exactly those
// keys: the ones an export no longer exports are removed, and a key
// someone else put on the ServiceImport is left alone unless an export
// exports it too.

// ImportFieldManager is the field manager of a ServiceImport's exported
// labels and annotations (the same name as the stamp's).
const ImportFieldManager = ExportFieldManager

// appliedMetadata is what the controller has applied on si as
// ImportFieldManager (from its managed fields, which the ServiceImports
// informer keeps for that manager), with si's values: the exported labels
// (but the owner label, labels.ManagedBy, which every apply carries) and
// annotations.
func appliedMetadata(si *mcsv1beta1.ServiceImport) (mcs.Metadata, error) {
	var out mcs.Metadata
	for _, f := range si.ManagedFields {
		if f.Manager != ImportFieldManager || f.Operation != metav1.ManagedFieldsOperationApply || f.Subresource != "" || f.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Labels      map[string]json.RawMessage `json:"f:labels"`
				Annotations map[string]json.RawMessage `json:"f:annotations"`
			} `json:"f:metadata"`
		}
		if err := json.Unmarshal(f.FieldsV1.Raw, &fields); err != nil {
			return mcs.Metadata{}, fmt.Errorf("reading the fields %s owns on ServiceImport %s/%s: %w", ImportFieldManager, si.Namespace, si.Name, err)
		}
		out.Labels = ownedValues(fields.Metadata.Labels, si.Labels)
		out.Annotations = ownedValues(fields.Metadata.Annotations, si.Annotations)
		delete(out.Labels, labels.ManagedBy)
		if len(out.Labels) == 0 {
			out.Labels = nil
		}
	}
	return out, nil
}

// ownedValues are the pairs of have whose keys the managed fields owned
// name ("f:<key>").
func ownedValues(owned map[string]json.RawMessage, have map[string]string) map[string]string {
	var out map[string]string
	for f := range owned {
		k, ok := strings.CutPrefix(f, "f:")
		if !ok {
			continue
		}
		if v, ok := have[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// importMetadataApply is the server-side apply configuration that gives
// si exactly the exported labels and annotations want, with the owner
// label (so that an apply that finds si gone makes nothing that is not
// the controller's) and si's UID (so that it changes no other
// ServiceImport of the name).
func importMetadataApply(si *mcsv1beta1.ServiceImport, want mcs.Metadata) ([]byte, error) {
	lbls := map[string]string{labels.ManagedBy: labels.ManagedByValue}
	for k, v := range want.Labels {
		lbls[k] = v
	}
	meta := map[string]any{"name": si.Name, "namespace": si.Namespace, "uid": si.UID, "labels": lbls}
	if len(want.Annotations) > 0 {
		meta["annotations"] = want.Annotations
	}
	return json.Marshal(map[string]any{
		"apiVersion": mcsv1beta1.SchemeGroupVersion.String(),
		"kind":       "ServiceImport",
		"metadata":   meta,
	})
}

// applyImportMetadata gives si the exported labels and annotations want,
// when they are not what the controller applied already.
func (c *Controller) applyImportMetadata(ctx context.Context, si *mcsv1beta1.ServiceImport, want mcs.Metadata) error {
	have, err := appliedMetadata(si)
	if err != nil {
		return err
	}
	if have.Equal(want) {
		return nil
	}
	body, err := importMetadataApply(si, want)
	if err != nil {
		return err
	}
	_, err = c.mcs.client.MulticlusterV1beta1().ServiceImports(si.Namespace).Patch(ctx, si.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: ImportFieldManager, Force: ptr.To(true)})
	if err := countWrite("apply", "serviceimports", err); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Applied the exported labels and annotations", "serviceImport", klog.KObj(si),
		"labels", len(want.Labels), "annotations", len(want.Annotations))
	return nil
}

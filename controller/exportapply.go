package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ExportFieldManager is the field manager of the stamp: the controller
// writes it by server-side apply (and removes it by a merge patch, which
// takes away the keys whoever wrote them).
const ExportFieldManager = "mcmirror-controller"

// syncExport brings one namespace/name to its plan: the stamp on the
// Service, then the ServiceExport's conditions. Each is written only when
// it differs, so a second sync of the same state writes nothing. sources
// are the clusterset's exports of it (importSources): the linked
// clusters' among them are what a Conflict is computed against.
func (c *Controller) syncExport(ctx context.Context, key string, sources []importSource) error {
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	in := exportInput{cluster: c.opts.Cluster, defaultMode: c.opts.ServiceExportMode}
	if obj, ok, _ := c.mcs.exports.GetIndexer().GetByKey(key); ok {
		in.export, _ = obj.(*mcsv1beta1.ServiceExport)
	}
	if obj, ok, _ := c.services.GetIndexer().GetByKey(key); ok {
		in.service, _ = obj.(*corev1.Service)
	}
	if in.service != nil {
		if in.owned, err = ownedStamp(in.service); err != nil {
			return err
		}
	}
	if in.export != nil {
		for _, s := range sources {
			if s.cluster != c.opts.Cluster {
				in.peers = append(in.peers, mcs.Export{Cluster: s.cluster, Created: s.created, Service: s.service, Metadata: s.metadata})
			}
		}
	}
	p := planExport(in)
	if p.writeStamp {
		if err := c.writeStamp(ctx, in.service, p.stamp); err != nil {
			return err
		}
		if p.foreign != (stamp{}) {
			c.stampRefused(in.service, p.foreign, p.stamp)
		}
		if p.stamp == (stamp{}) {
			klog.FromContext(ctx).V(2).Info("Removed the ServiceExport stamp", "service", klog.KObj(in.service))
		} else {
			klog.FromContext(ctx).V(2).Info("Stamped exported Service", "service", klog.KObj(in.service), "mode", p.stamp.mode)
		}
		in.owned = p.stamp
		p = planExport(in)
	}
	if in.export == nil {
		return nil
	}
	conds, changed := mcs.Apply(in.export.Status.Conditions, in.export.Generation, p.conditions...)
	if !changed {
		return nil
	}
	se := in.export.DeepCopy()
	se.Status.Conditions = conds
	_, err = c.mcs.client.MulticlusterV1beta1().ServiceExports(ns).UpdateStatus(ctx, se, metav1.UpdateOptions{})
	if err := countWrite("update", "serviceexports/status", err); err != nil {
		return err
	}
	c.exportRefused(in.export, p.conditions)
	c.exportMetadataRefused(in.export, p.conditions, p.refusedMetadata)
	return nil
}

// ownedStamp reads the stamp the controller owns on svc, from its managed
// fields (the local Services informer keeps the controller's own entry).
func ownedStamp(svc *corev1.Service) (stamp, error) {
	ac, err := corev1ac.ExtractService(svc, ExportFieldManager)
	if err != nil {
		return stamp{}, fmt.Errorf("reading the fields %s owns on Service %s/%s: %w", ExportFieldManager, svc.Namespace, svc.Name, err)
	}
	if ac.ObjectMetaApplyConfiguration == nil {
		return stamp{}, nil
	}
	return stampOf(ac.Labels, ac.Annotations), nil
}

// writeStamp makes the stamp on svc exactly s. A stamp is applied, with
// force: the controller then owns its fields, whoever wrote them before.
// None is a merge patch that removes its keys, whoever wrote them (an
// apply of nothing would remove only the fields the controller owns). The
// UID is a precondition either way: a Service deleted and made again is
// read again before it is stamped.
func (c *Controller) writeStamp(ctx context.Context, svc *corev1.Service, s stamp) error {
	services := c.client.CoreV1().Services(svc.Namespace)
	if s == (stamp{}) {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":         svc.UID,
			"labels":      map[string]any{labels.ServiceExportMode: nil},
			"annotations": map[string]any{labels.ServiceExportCreated: nil, labels.ServiceExportMetadata: nil},
		}})
		if err != nil {
			return err
		}
		_, err = services.Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return countWrite("patch", "services", err)
	}
	ac := corev1ac.Service(svc.Name, svc.Namespace).WithUID(svc.UID).
		WithLabels(map[string]string{labels.ServiceExportMode: s.mode}).
		WithAnnotations(map[string]string{labels.ServiceExportCreated: s.created, labels.ServiceExportMetadata: s.metadata})
	_, err := services.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: ExportFieldManager, Force: true})
	return countWrite("apply", "services", err)
}

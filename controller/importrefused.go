package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The endpoints imports leave out (importscreen.go): the
// import_endpoints_refused gauge, and a warning Event on the
// ServiceImport each time what one leaves out changes.

// refusedWhat says, for an Event, what each reason means.
var refusedWhat = map[string]string{
	endpointpolicy.Address:      "at a loopback, link-local, unspecified, multicast or broadcast address",
	endpointpolicy.DeniedCIDR:   "in a --deny-cidr range",
	endpointpolicy.Selectorless: "of a selector-less Service not opted in with --allow-selectorless",
	endpointpolicy.Unmanaged:    "in EndpointSlices the EndpointSlice controller did not write",
	endpointpolicy.NotAPod:      "not a Pod of the Service's namespace",
}

// noteRefusals records what the import si leaves out now: the gauge, and
// when it changed, the log and an Event per kind (the endpoint policy's
// refusals, the limit's).
func (c *Controller) noteRefusals(si *mcsv1beta1.ServiceImport, now refusals) {
	key := si.Namespace + "/" + si.Name
	c.mu.Lock()
	old := c.importRefused[key]
	if len(now) == 0 {
		delete(c.importRefused, key)
	} else {
		c.importRefused[key] = now
	}
	c.mu.Unlock()
	if old.equal(now) {
		return
	}
	addRefused(old, -1)
	addRefused(now, 1)
	var policy, limited []string
	for _, cluster := range slices.Sorted(maps.Keys(now)) {
		var parts []string
		for _, r := range endpointpolicy.Reasons {
			if n := now[cluster][r]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s (%s)", n, refusedWhat[r], r))
			}
		}
		if len(parts) > 0 {
			policy = append(policy, cluster+": "+strings.Join(parts, ", "))
		}
		if n := now[cluster][refusedLimit]; n > 0 {
			limited = append(limited, fmt.Sprintf("%d of %s", n, cluster))
		}
	}
	if len(policy) > 0 {
		msg := "Endpoints of linked clusters' flat-mode exports not imported: " + strings.Join(policy, "; ") +
			". Only Pods of the exported Service's namespace listed by the EndpointSlice controller are imported"
		klog.InfoS("Import leaves endpoints out", "serviceImport", klog.KObj(si), "refused", policy)
		c.recorder.Event(mcsRef("ServiceImport", si), corev1.EventTypeWarning, ReasonImportEndpointsRefused, msg)
	}
	if len(limited) > 0 {
		msg := fmt.Sprintf("The import carries at most %d endpoints (--max-import-endpoints), shared among the exporting clusters; left out: %s",
			c.opts.MaxImportEndpoints, strings.Join(limited, ", "))
		klog.InfoS("Import over its endpoint limit", "serviceImport", klog.KObj(si), "limit", c.opts.MaxImportEndpoints, "leftOut", limited)
		c.recorder.Event(mcsRef("ServiceImport", si), corev1.EventTypeWarning, ReasonImportEndpointsLimited, msg)
	}
}

// forgetRefusals forgets the import key (namespace/name), deleted.
func (c *Controller) forgetRefusals(key string) {
	c.mu.Lock()
	old := c.importRefused[key]
	delete(c.importRefused, key)
	c.mu.Unlock()
	addRefused(old, -1)
}

// addRefused adds r, times sign, to the import_endpoints_refused gauge.
func addRefused(r refusals, sign float64) {
	for _, byReason := range r {
		for reason, n := range byReason {
			importEndpointsRefused.WithLabelValues(reason).Add(sign * float64(n))
		}
	}
}

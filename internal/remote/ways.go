package remote

import (
	"github.com/mcmirror/mcmirror/internal/labels"

	discoveryv1 "k8s.io/api/discovery/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Way is one way a cluster exports a Service, with the selector of the
// Services it exports. A label selector cannot say "this label or that
// one", so each way is a watch of its own, of Services and of slices.
type Way struct {
	// Name names the way's watch of Services in logs.
	Name string
	// Services selects the Services exported this way, never a mirror
	// nor a derived Service: what mcmirror made is not exported again.
	Services k8slabels.Selector
}

// Slices selects the EndpointSlices of the Services the way exports. The
// EndpointSlice controller copies a Service's labels onto the slices it
// manages, so the API server sends these slices and no other. The rule
// for a selector-less Service, whose slices someone writes by hand: they
// must carry the export label themselves, or they are not seen.
func (w Way) Slices() k8slabels.Selector {
	hasService, err := k8slabels.NewRequirement(discoveryv1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant
	}
	reqs, _ := w.Services.Requirements()
	return k8slabels.NewSelector().Add(reqs...).Add(*hasService)
}

// SlicesName names the way's watch of slices in logs.
func (w Way) SlicesName() string { return "EndpointSlices of " + w.Name }

// Selected is the way of the export selector, Linkerd's label by default.
// Its users refuse an empty selector, which would export every Service.
func Selected(export k8slabels.Selector) Way {
	reqs, _ := export.Requirements()
	sel := k8slabels.NewSelector().Add(reqs...)
	for _, made := range []string{labels.MirroredService, labels.ServiceImport} {
		r, err := k8slabels.NewRequirement(made, selection.DoesNotExist, nil)
		if err != nil {
			panic(err) // a constant
		}
		sel = sel.Add(*r)
	}
	return Way{Name: "Services", Services: sel}
}

// Stamped is the way of a ServiceExport: the exporting cluster's
// controller stamps the Service (labels.ServiceExportMode).
var Stamped = Way{Name: "ServiceExport Services", Services: mustParse(labels.ServiceExportSelector)}

// Federated is the way of the members of Linkerd's federated Services
// (labels.FederatedSelector).
var Federated = Way{Name: "federated Services", Services: mustParse(labels.FederatedSelector)}

func mustParse(s string) k8slabels.Selector {
	sel, err := k8slabels.Parse(s)
	if err != nil {
		panic(err) // a constant
	}
	return sel
}

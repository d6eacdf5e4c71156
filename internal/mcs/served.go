package mcs

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Served reports whether the cluster serves the ServiceExport and
// ServiceImport resources of the version mcmirror uses: whether the CRDs
// are installed.
func Served(dc discovery.ServerResourcesInterface) (bool, error) {
	gv := mcsv1beta1.SchemeGroupVersion.String()
	list, err := dc.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	found := 0
	for _, r := range list.APIResources {
		if r.Name == "serviceexports" || r.Name == "serviceimports" {
			found++
		}
	}
	return found == 2, nil
}

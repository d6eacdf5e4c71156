package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The IP families of a ClusterSetIP import's derived Service (pure, for
// importplan.go). kube-proxy uses only the EndpointSlices of a Service's
// own families, so the derived Service takes the families by which this
// cluster reaches the exports, on every sync, both ways: the union of
// the sources' families (importSource.families), in order of precedence.
//
//   - two families: PreferDualStack, ipFamilies unwritten, so the API
//     server gives the cluster's primary family first, and the other
//     where the cluster has it;
//   - one family: SingleStack in that family (a cluster without it
//     refuses the create: nothing could be routed anyway);
//   - none known yet (a gateway-mode export whose mirror has no slice
//     yet): a new derived Service gets the cluster's default, an
//     existing one is left as it is.
//
// The API server changes ipFamilyPolicy in place (SingleStack to
// PreferDualStack adds the second family and ClusterIP; back, it drops
// them), never the primary family: a derived Service whose primary
// family no source has any more is replaced, and its ClusterSetIP
// changes, which nothing can avoid.

// importFamilies are the families of the import's sources, in order of
// precedence (the merged clusters' order), then those of the slices kept
// for clusters whose links have not synced.
func importFamilies(in importInput, order []string) []corev1.IPFamily {
	var out []corev1.IPFamily
	add := func(f corev1.IPFamily) {
		if (f == corev1.IPv4Protocol || f == corev1.IPv6Protocol) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, c := range order {
		for _, s := range in.sources {
			if s.cluster == c {
				for _, f := range s.families {
					add(f)
				}
			}
		}
	}
	for _, kept := range in.kept {
		for _, f := range sliceFamilies(kept) {
			add(f)
		}
	}
	return out
}

// sliceFamilies are the IP families of the address types of sls, IPv4
// first.
func sliceFamilies(sls []*discoveryv1.EndpointSlice) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		if slices.ContainsFunc(sls, func(es *discoveryv1.EndpointSlice) bool { return es.AddressType == at }) {
			out = append(out, corev1.IPFamily(at))
		}
	}
	return out
}

// setFamilies sets the IP family policy (and, single-stack, the family)
// of the derived Service svc for families.
func setFamilies(svc *corev1.Service, families []corev1.IPFamily) {
	switch len(families) {
	case 1:
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{families[0]}
	case 2:
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyPreferDualStack)
	}
}

// lostPrimary reports whether the existing derived Service's primary
// family is none of families (none known: not lost).
func lostPrimary(derived *corev1.Service, families []corev1.IPFamily) bool {
	return len(families) > 0 && len(derived.Spec.IPFamilies) > 0 && !slices.Contains(families, derived.Spec.IPFamilies[0])
}

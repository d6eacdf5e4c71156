package link

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Why a list or watch of a linked cluster failed: the reason label of the
// DNS plugin's and the controller's link_errors_total.
const (
	FailureUnreachable  = "unreachable"  // no answer: refused, timed out, TLS, a 5xx
	FailureUnauthorized = "unauthorized" // 401: credentials refused or expired
	FailureForbidden    = "forbidden"    // 403: RBAC does not allow the list or watch
	FailureError        = "error"        // another answer of the API server
)

// FailureReasons lists every failure reason, for metrics that start at 0.
var FailureReasons = [...]string{FailureUnreachable, FailureUnauthorized, FailureForbidden, FailureError}

// FailureReason classifies the error of a list or watch of a cluster.
func FailureReason(err error) string {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsUnauthorized(err):
		return FailureUnauthorized
	case apierrors.IsForbidden(err):
		return FailureForbidden
	case apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return FailureUnreachable
	case errors.As(err, &status):
		return FailureError
	}
	return FailureUnreachable // refused, timed out, TLS, DNS: no answer
}

package link

import (
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestFailureReason(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewUnauthorized("token expired"), FailureUnauthorized},
		{apierrors.NewForbidden(gr, "", errors.New("no role")), FailureForbidden},
		{apierrors.NewServiceUnavailable("starting"), FailureUnreachable},
		{apierrors.NewInternalError(errors.New("etcd")), FailureUnreachable},
		{apierrors.NewTimeoutError("slow", 1), FailureUnreachable},
		{apierrors.NewBadRequest("bad selector"), FailureError},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, FailureUnreachable},
	} {
		assert.Equal(t, tc.want, FailureReason(tc.err), "%v", tc.err)
	}
}

package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClaimLeaseNullRefused: claimRequest decodes lease_ms as a pointer
// "so an explicit 0 or null is refused rather than taken for absent"
// (api/request.go), and extend refuses null. A claim with "lease_ms":null
// is instead taken as a claim without lease_ms and written with the default
// lease: a malformed request changes state.
func TestClaimLeaseNullRefused(t *testing.T) {
	n := mustNode(t)
	before := n.stateHash()
	r := n.do("POST", "/v1/claim", `{"principal":"p","endpoint":"e","key":"k","fingerprint":"00","lease_ms":null}`)
	p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	require.Contains(t, p["detail"], "lease_ms")
	require.Equal(t, before, n.stateHash(), "a rejected request wrote")
}

package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A member misspelt in a request body (`lease` for `lease_ms`, the unit
// left off) was answered `unknown field "lease"`, leaving the caller to
// find the name in docs/API.md. The detail now names the known member of
// the same object nearest to it (within two edits, the same but for case,
// or the name with its unit); the status and code stay 400
// invalid_request, as docs/API.md says, and a name near none is answered
// as before.
func TestUnknownFieldSuggestsTheNearestName(t *testing.T) {
	n := mustNode(t)
	const claim = `"principal":"p","endpoint":"e","key":"k","fingerprint":"ab"`
	for _, c := range []struct{ path, body, detail string }{
		{"/v1/claim", `{` + claim + `,"lease":5000}`, `unknown field "lease" (did you mean "lease_ms"?)`},
		{"/v1/claim", `{"principal":"p","endpoint":"e","key":"k","fingerprnt":"ab"}`, `unknown field "fingerprnt" (did you mean "fingerprint"?)`},
		{"/v1/claim", `{` + claim + `,"lease_sm":5000}`, `unknown field "lease_sm" (did you mean "lease_ms"?)`},
		{"/v1/claim", `{` + claim + `,"Lease_MS":5000}`, `unknown field "Lease_MS" (names are case-sensitive; did you mean "lease_ms"?)`},
		{"/v1/claim", `{` + claim + `,"tenant":"x"}`, `unknown field "tenant"`},
		{"/v1/claim", `{` + claim + `,"x":1}`, `unknown field "x"`},
		{"/v1/complete", `{"token":"t","response":{"status":200,"stauts":1}}`, `unknown field "response.stauts" (did you mean "status"?)`},
	} {
		p := requireProblem(t, n.post(c.path, c.body), 400, "invalid_request")
		require.Equal(t, c.detail, p["detail"], "%s", c.body)
	}

	// An op of a batch is answered as its route would be.
	rs := n.batch(json.RawMessage(`{"op":"claim",` + claim + `,"lease":5000}`))
	require.Equal(t, 400, rs[0].Status, "%s", rs[0].Body)
	require.Contains(t, string(rs[0].Body), `unknown field \"lease\" (did you mean \"lease_ms\"?)`)
}

package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecordStringsNotHTMLEscaped: docs/API.md (GET /v1/records) promises
// "Stored strings come back exactly as sent (no HTML escaping), so a replay
// can be byte-for-byte the original", and writeJSON turns HTML escaping
// off for that. But wire.Record.MarshalJSON (and wire.Response's) call
// json.Marshal, which escapes <, > and & as \u003c, \u003e, \u0026 before
// writeJSON sees the bytes: every record in a lookup, a replay, a complete's
// answer and a batch result comes back escaped.
func TestRecordStringsNotHTMLEscaped(t *testing.T) {
	n := mustNode(t)
	r := n.do("POST", "/v1/claim", `{"principal":"p","endpoint":"POST /<p>","key":"k&","fingerprint":"00","correlation_id":"<c&>"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	q := url.Values{"principal": {"p"}, "endpoint": {"POST /<p>"}, "key": {"k&"}}
	r = n.do("GET", "/v1/records?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, r.status, string(r.raw))
	require.Contains(t, string(r.raw), `"correlation_id":"<c&>"`)
	require.Contains(t, string(r.raw), `"endpoint":"POST /<p>"`)
}

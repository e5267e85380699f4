package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The auth guard reads an app token's body for the principal it names,
// then the handler reads it again: it was copied a second time, so every
// such body was held twice while its request ran (against
// --max-inflight-bytes, which counts it once). The handler now gets the
// guard's bytes.
func TestBodyReadForThePrincipalIsNotCopiedAgain(t *testing.T) {
	s := New(nil, Config{Limits: DefaultLimits()})
	body := `{"principal":"cus_1","endpoint":"e","key":"k","fingerprint":"aa"}`
	r := httptest.NewRequest("POST", "/v1/claim", strings.NewReader(body))
	w := httptest.NewRecorder()
	p, ok := s.principalOf(w, r, principalInBody)
	require.True(t, ok)
	require.Equal(t, "cus_1", *p)
	first := r.Body.(*readBytes).b
	again, prob := s.readBody(w, r)
	require.Nil(t, prob)
	require.Equal(t, body, string(again))
	require.Same(t, &first[0], &again[0], "the handler reads the guard's bytes, not a copy")
}

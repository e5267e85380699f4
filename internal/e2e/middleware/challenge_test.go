package e2emiddleware_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// The middleware's own 401 (its Principal failed) names a challenge in
// WWW-Authenticate, as RFC 9110 (11.6.1) requires of every 401 and as the
// store's own 401 does (Bearer realm="idem"). Bug: it sent none, and a
// client that acts on the challenge had nothing to go by. Bearer, or
// Basic to a caller that used Basic; Options.Challenge names another, and
// one set before the middleware ran is kept.
func TestUnauthorizedNamesAChallenge(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	e := newEnv(t, middleware.Options{Principal: middleware.AuthorizationPrincipal}, h)
	named := newEnv(t, middleware.Options{Principal: middleware.AuthorizationPrincipal, Challenge: `Bearer realm="payments"`}, h)
	send := func(url, authorization string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct{ url, authorization, want string }{
		{e.url, "", "Bearer"},
		{e.url, "Bearer undefined", "Bearer"},
		{e.url, "basic Og==", `Basic realm="idempotency"`},
		{named.url, "", `Bearer realm="payments"`},
	} {
		resp := send(c.url, c.authorization)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, c.authorization)
		require.Equal(t, []string{c.want}, resp.Header.Values("WWW-Authenticate"), c.authorization)
	}
	ok := send(e.url, "Bearer alice")
	require.Equal(t, http.StatusOK, ok.StatusCode)
	require.Empty(t, ok.Header.Values("WWW-Authenticate"))
}

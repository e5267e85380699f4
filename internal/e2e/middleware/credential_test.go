package e2emiddleware_test

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// A handler's (an upstream's, behind idem proxy) 401 or 403 was stored and
// replayed for the whole retention: a caller whose token had expired got
// 401, retried with a fresh token under the same principal (the account,
// as the package doc advises where tokens rotate), and was replayed the
// 401 for a day; the payment never ran. A refused credential or right is
// no answer to the request, which did not run: released, the retry runs.
func TestRefusedCredentialsAreNotStored(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Principal: middleware.HeaderPrincipal("X-Account")},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			switch r.Header.Get("Authorization") {
			case "Bearer expired":
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
				w.WriteHeader(http.StatusUnauthorized)
			case "Bearer read-only":
				w.WriteHeader(http.StatusForbidden)
			default:
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "charged")
			}
		})
	for _, c := range []struct {
		token  string
		status int
	}{{"expired", http.StatusUnauthorized}, {"read-only", http.StatusForbidden}} {
		runs.Store(0)
		key := fmt.Sprint("cred-", c.status)
		first, _ := send(key, "X-Account", "acct-1", "Authorization", "Bearer "+c.token)
		require.Equal(t, c.status, first.StatusCode)
		if c.status == http.StatusUnauthorized {
			require.Equal(t, `Bearer error="invalid_token"`, first.Header.Get("WWW-Authenticate"), "the handler's challenge reaches its caller")
		}
		again, body := send(key, "X-Account", "acct-1", "Authorization", "Bearer fresh")
		require.Equal(t, http.StatusCreated, again.StatusCode, "%d was replayed to the retry with a fresh credential: %s", c.status, body)
		require.Empty(t, again.Header.Get(middleware.HeaderReplayed))
		require.Equal(t, "charged", body)
		require.EqualValues(t, 2, runs.Load())
		// The answer that did the work is stored.
		replay, body := send(key, "X-Account", "acct-1", "Authorization", "Bearer fresh")
		require.Equal(t, "true", replay.Header.Get(middleware.HeaderReplayed), "%s", body)
		require.EqualValues(t, 2, runs.Load())
	}
}

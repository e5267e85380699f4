package middleware_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// A keyed principal is the HMAC of the canonical credential: what a reader
// of the store's logs or backups sees cannot be checked against a guessed
// password without the key, and it keeps AuthorizationPrincipal's
// refusals and its canonical form.
func TestKeyedAuthorizationPrincipal(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	req := func(authz ...string) *http.Request {
		r := httptest.NewRequest("POST", "/pay", nil)
		for _, a := range authz {
			r.Header.Add("Authorization", a)
		}
		return r
	}
	keyed := middleware.KeyedAuthorizationPrincipal(key)

	got, err := keyed(req("Basic dXNlcjpodW50ZXIy"))
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("Basic dXNlcjpodW50ZXIy"))
	require.Equal(t, "authk:"+hex.EncodeToString(m.Sum(nil)[:16]), got)

	plain, err := middleware.AuthorizationPrincipal(req("Basic dXNlcjpodW50ZXIy"))
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("Basic dXNlcjpodW50ZXIy"))
	require.Equal(t, "authz:"+hex.EncodeToString(sum[:16]), plain, "the unkeyed principal changed: every stored key would run again")
	require.NotEqual(t, plain[len("authz:"):], got[len("authk:"):])

	same, err := keyed(req("basic   dXNlcjpodW50ZXIy"))
	require.NoError(t, err)
	require.Equal(t, got, same, "the scheme's case and spacing are not another caller")
	other, err := middleware.KeyedAuthorizationPrincipal([]byte(strings.Repeat("j", 32)))(req("Basic dXNlcjpodW50ZXIy"))
	require.NoError(t, err)
	require.NotEqual(t, got, other, "another key gave the same principal")

	for _, bad := range [][]string{nil, {"Bearer"}, {"Bearer a", "Bearer b"}} {
		_, err := keyed(req(bad...))
		require.Error(t, err, "%q", bad)
	}

	anon := middleware.KeyedAnonymousPrincipal(key)
	p, err := anon(req())
	require.NoError(t, err)
	require.Equal(t, "anonymous", p)
	p, err = anon(req("Basic dXNlcjpodW50ZXIy"))
	require.NoError(t, err)
	require.Equal(t, got, p)
	_, err = anon(req("Bearer a", "Bearer b"))
	require.Error(t, err)
}

// A keyed fingerprint is an HMAC over DefaultFingerprint's fields: it
// still tells requests apart and is stable for one, and it depends on the
// key.
func TestKeyedFingerprint(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	fp := middleware.KeyedFingerprint(key)
	r := httptest.NewRequest("POST", "/pay?x=1", nil)
	r.Header.Set("Content-Type", "application/json")
	a, err := fp(r, "POST /pay", []byte(`{"amount":1}`))
	require.NoError(t, err)
	again, err := fp(r, "POST /pay", []byte(`{"amount":1}`))
	require.NoError(t, err)
	require.Equal(t, a, again)
	b, err := fp(r, "POST /pay", []byte(`{"amount":2}`))
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	plain, err := middleware.DefaultFingerprint(r, "POST /pay", []byte(`{"amount":1}`))
	require.NoError(t, err)
	require.NotEqual(t, plain, a, "the keyed fingerprint is the plain hash")
	// Both hash the length-prefixed method, path, query, Content-Type and
	// body; the plain one must not change (stored fingerprints would all
	// differ after an upgrade: every retry a 422).
	var fields []byte
	m := hmac.New(sha256.New, key)
	for _, f := range []string{"POST", "/pay", "x=1", "application/json", `{"amount":1}`} {
		fields = binary.BigEndian.AppendUint64(fields, uint64(len(f)))
		fields = append(fields, f...)
	}
	m.Write(fields)
	require.Equal(t, hex.EncodeToString(m.Sum(nil)), a)
	sum := sha256.Sum256(fields)
	require.Equal(t, hex.EncodeToString(sum[:]), plain)
	other, err := middleware.KeyedFingerprint([]byte(strings.Repeat("j", 32)))(r, "POST /pay", []byte(`{"amount":1}`))
	require.NoError(t, err)
	require.NotEqual(t, a, other)
	require.Len(t, a, 64)
}

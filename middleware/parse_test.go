package middleware_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/middleware"
)

// The tests that need a running store are in internal/e2e/middleware: a
// module that imports this package loads its tests (go mod tidy does), and
// those would bring in the store.

func TestParseKey(t *testing.T) {
	good := map[string]string{
		`"abc"`:     "abc",
		`abc`:       "abc",
		` "a b" `:   "a b",
		`"a\"b\\c"`: `a"b\c`,
		`"k";p=1`:   "k",
		// parameters of every kind, a string's holding a comma
		`"k" ; a ;b=?1;c=-1.5;d=tok/en:1;e=:aGk=:;f="x,\"y\";z"`: "k",
		`tok:en/1`: "tok:en/1",
		// A bare key is taken whole: two parts of one invoice are two
		// keys, not the key "inv-7" twice (the second was replayed the
		// first's answer).
		`inv-7;part-1`:        "inv-7;part-1",
		`inv-7;part-2`:        "inv-7;part-2",
		`k;p=1`:               "k;p=1",
		`"` + long(255) + `"`: long(255),
	}
	for in, want := range good {
		got, err := middleware.ParseKey([]string{in})
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
	bad := map[string][]string{
		"missing":             nil,
		"twice":               {`"a"`, `"a"`},
		"empty string":        {`""`},
		"empty field":         {""},
		"a list":              {`"a", "b"`},
		"bare list":           {"a,b"},
		"unterminated":        {`"abc`},
		"bad escape":          {`"a\nb"`},
		"control":             {"\"a\x01\""},
		"non-ASCII":           {"\"caf\xc3\xa9\""},
		"bare with space":     {"a b"},
		"bare with quote":     {`a"b`},
		"bare, space after ;": {"a;b c"},
		"256 bytes":           {`"` + long(256) + `"`},
		"256 bytes, bare":     {long(256)},
		"trailing garbage":    {`"a" b`},
		// a list whose first key has a parameter: two keys, not "a"
		"a list after parameters":     {`"a";p, "b"`},
		"a list after a value":        {`"a";p=1,"b"`},
		"garbage in parameters":       {`"a";p=1 2`},
		"unterminated parameter":      {`"a";p="x`},
		"empty parameter":             {`"a";`},
		"parameter key in upper case": {`"a";P=1`},
	}
	for name, in := range bad {
		_, err := middleware.ParseKey(in)
		require.Error(t, err, name)
	}
	_, err := middleware.ParseKey([]string{`"abc";Foo=bar`})
	require.ErrorContains(t, err, "the parameters after the key's string are malformed", "not \"got more after it\"")
}

func long(n int) string { return strings.Repeat("k", n) }

func TestNewReportsEveryBadOption(t *testing.T) {
	_, err := middleware.New(middleware.Options{Lease: time.Millisecond, WaitInProgress: -1, CallerGoneTimeout: -time.Second, Methods: []string{"post"},
		Challenge: "Bearer\r\nSet-Cookie: x=1"})
	require.Error(t, err)
	for _, want := range []string{"Store is required", "Lease", "WaitInProgress", "CallerGoneTimeout", `"post"`, "Challenge"} {
		require.Contains(t, err.Error(), want)
	}
}

// Whatever a client sends, ParseKey never panics and accepts only what the
// store accepts: 1 to 255 bytes of printable ASCII.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"k";p=1`, `""`, `"a", "b"`, "\"\xff\"", `"` + long(300) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := middleware.ParseKey([]string{in})
		if err != nil {
			return
		}
		if len(key) < 1 || len(key) > 255 {
			t.Fatalf("%q accepted as a key of %d bytes", in, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("%q accepted with byte 0x%02x", in, key[i])
			}
		}
	})
}

// An Authorization scheme without its credential ("Bearer", or "Bearer "
// from a token variable left unset) counted as a credential: every such
// caller was one principal, handed the others' stored answers. It is no
// credential (401, as a missing header; AnonymousPrincipal's "anonymous").
// A single word that names no scheme (a bare API key) still is one.
func TestSchemeWithoutCredentialIsNoAuthorization(t *testing.T) {
	principal := func(f func(*http.Request) (string, error), v string) (string, error) {
		r := httptest.NewRequest(http.MethodPost, "/pay", nil)
		r.Header.Set("Authorization", v)
		return f(r)
	}
	for _, v := range []string{"Bearer", "Bearer ", "Bearer  \t", "bearer", "Basic ", "Token",
		// The text of an unset token variable: one principal for every
		// caller whose client formatted it.
		"Bearer undefined", "Bearer null", "Bearer None", "Bearer <nil>", "Bearer %!s(<nil>)", "Token nil",
		"Bearer [object Object]", "undefined", "NULL"} {
		_, err := principal(middleware.AuthorizationPrincipal, v)
		require.Error(t, err, "%q", v)
		// Told it had no header, its sender looked for the wrong fault.
		require.Contains(t, err.Error(), "holds no credential", "%q", v)
		require.NotContains(t, err.Error(), "no Authorization header", "%q", v)
		p, err := principal(middleware.AnonymousPrincipal, v)
		require.NoError(t, err, "%q", v)
		if strings.Contains(strings.TrimSpace(v), " ") || strings.EqualFold(v, "undefined") || strings.EqualFold(v, "null") {
			continue // the text of an unset value: TestAnonymousKeepsTheUnsetValuesPrincipal
		}
		require.Equal(t, "anonymous", p, "%q", v)
	}
	for _, v := range []string{"Bearer T", "sk_live_1", "Basic bnVsbA==", "Bearer nullable", "Bearer null2"} {
		_, err := principal(middleware.AuthorizationPrincipal, v)
		require.NoError(t, err, "%q", v)
	}
}

// Basic credentials with neither a user nor a password (":", "Basic
// Og==": what curl -u :, axios and Python requests send for a username
// and password left unset), or with the text of unset values for both
// ("undefined:undefined"), are no credential either: hashed, every such
// caller was one principal. Through idem proxy in front of a service
// that serves guests by cookie, one guest's stored answer, Set-Cookie
// and all, was replayed to another that sent the same key, as "Bearer
// undefined" was before it was refused. A user with an empty password (an
// API key sent as the user, curl -u sk_test_1:) stays a credential, and
// so does a payload without a colon.
func TestBasicWithoutUserOrPasswordIsNoCredential(t *testing.T) {
	principal := func(f func(*http.Request) (string, error), v string) (string, error) {
		r := httptest.NewRequest(http.MethodPost, "/pay", nil)
		r.Header.Set("Authorization", v)
		return f(r)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, v := range []string{"Basic " + b64(":"), "basic  " + b64(":"), "Basic " + b64("undefined:undefined"),
		"Basic " + b64("null:"), "Basic " + b64(":None"), "Basic Og"} {
		_, err := principal(middleware.AuthorizationPrincipal, v)
		require.Error(t, err, "%q", v)
		require.Contains(t, err.Error(), "holds no credential", "%q", v)
		_, err = principal(middleware.KeyedAuthorizationPrincipal([]byte(strings.Repeat("k", 32))), v)
		require.Error(t, err, "%q", v)
	}
	// --allow-anonymous keeps the principal such a caller had before, as
	// for "Bearer undefined": its retries across the upgrade are replayed.
	sum := sha256.Sum256([]byte("Basic Og=="))
	p, err := principal(middleware.AnonymousPrincipal, "basic  Og==")
	require.NoError(t, err)
	require.Equal(t, "authz:"+hex.EncodeToString(sum[:16]), p)
	for _, v := range []string{"Basic " + b64("sk_test_1:"), "Basic " + b64(":hunter2"), "Basic " + b64("alice:pw"),
		"Basic bnVsbA==", "Basic " + b64("undefined"), "Basic !!notbase64", "Bearer " + b64(":")} {
		_, err := principal(middleware.AuthorizationPrincipal, v)
		require.NoError(t, err, "%q", v)
	}
}

// With AnonymousPrincipal (idem proxy --allow-anonymous) every caller
// without a credential shares a principal anyway, so "Bearer undefined"
// keeps the one it had before it was counted as no credential, a hash of
// the header: taken for "anonymous", every request stored under it was
// run again when its client retried across the upgrade (a second charge,
// reproduced through idem proxy). AuthorizationPrincipal still refuses it.
func TestAnonymousKeepsTheUnsetValuesPrincipal(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	for _, v := range []string{"Bearer undefined", "bearer  null", "Token nil", "undefined"} {
		r := httptest.NewRequest(http.MethodPost, "/pay", nil)
		r.Header.Set("Authorization", v)
		canon := v
		if scheme, rest, ok := strings.Cut(v, " "); ok {
			canon = strings.ToUpper(scheme[:1]) + strings.ToLower(scheme[1:]) + " " + strings.TrimLeft(rest, " ")
		}
		sum := sha256.Sum256([]byte(canon))
		p, err := middleware.AnonymousPrincipal(r)
		require.NoError(t, err, "%q", v)
		require.Equal(t, "authz:"+hex.EncodeToString(sum[:16]), p, "%q: the principal the release before gave it", v)
		m := hmac.New(sha256.New, key)
		m.Write([]byte(canon))
		p, err = middleware.KeyedAnonymousPrincipal(key)(r)
		require.NoError(t, err, "%q", v)
		require.Equal(t, "authk:"+hex.EncodeToString(m.Sum(nil)[:16]), p, "%q", v)
		_, err = middleware.AuthorizationPrincipal(r)
		require.Error(t, err, "%q", v)
	}
	for _, v := range []string{"", "Bearer ", "Bearer"} {
		r := httptest.NewRequest(http.MethodPost, "/pay", nil)
		if v != "" {
			r.Header.Set("Authorization", v)
		}
		p, err := middleware.AnonymousPrincipal(r)
		require.NoError(t, err)
		require.Equal(t, "anonymous", p, "%q", v)
	}
}

// A lease shorter than a failover let a retry run the handler again (a
// walk under faults: a 3s lease, payments charged twice while the cluster
// elected a leader): New takes it, with a warning naming it.
func TestNewWarnsOfAShortLease(t *testing.T) {
	store, err := client.New("http://127.0.0.1:1")
	require.NoError(t, err)
	warned := func(lease time.Duration) string {
		var out strings.Builder
		_, err := middleware.New(middleware.Options{Store: store, Lease: lease, Logger: slog.New(slog.NewTextHandler(&out, nil))})
		require.NoError(t, err)
		return out.String()
	}
	require.Contains(t, warned(3*time.Second), "idempotency lease is shorter than 10s")
	require.Contains(t, warned(3*time.Second), "lease=3s")
	require.Empty(t, warned(middleware.ShortLease))
	require.Empty(t, warned(0), "the default")
}

package middleware_test

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/middleware"
)

// multipartRequest is a form as curl -F, a browser or Go's mime/multipart
// sends it: a random boundary each time it is made.
func multipartRequest(t *testing.T, fields ...string) (contentType string, body []byte) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		require.NoError(t, w.WriteField(fields[i], fields[i+1]))
	}
	require.NoError(t, w.Close())
	return w.FormDataContentType(), b.Bytes()
}

// A multipart request made anew for its retry has another boundary, in its
// Content-Type and its body: fingerprinted whole, every such retry was
// another request (422 fingerprint_mismatch), and its sender never learned
// what became of the first. The parts count, the boundary does not.
func TestMultipartFingerprintIgnoresTheBoundary(t *testing.T) {
	fp := func(ct string, body []byte) string {
		r := httptest.NewRequest("POST", "/upload", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		s, err := middleware.DefaultFingerprint(r, "POST /upload", body)
		require.NoError(t, err)
		return s
	}
	ct1, b1 := multipartRequest(t, "amount", "100", "currency", "eur")
	ct2, b2 := multipartRequest(t, "amount", "100", "currency", "eur")
	require.NotEqual(t, ct1, ct2, "the writer picks a new boundary")
	require.Equal(t, fp(ct1, b1), fp(ct2, b2), "the same form, made again")

	ct3, b3 := multipartRequest(t, "amount", "200", "currency", "eur")
	require.NotEqual(t, fp(ct1, b1), fp(ct3, b3), "another amount")
	ct4, b4 := multipartRequest(t, "amount", "100", "currenc", "yeur")
	require.NotEqual(t, fp(ct1, b1), fp(ct4, b4), "bytes moved between a part's name and its content")
	ct5, b5 := multipartRequest(t, "currency", "eur", "amount", "100")
	require.NotEqual(t, fp(ct1, b1), fp(ct5, b5), "the parts in another order")
	ct6, b6 := multipartRequest(t, "amount", "100")
	require.NotEqual(t, fp(ct1, b1), fp(ct6, b6), "a part fewer")

	// Not well-formed multipart is fingerprinted whole, boundary and all.
	require.NotEqual(t, fp("multipart/form-data; boundary=x", []byte("junk")), fp("multipart/form-data; boundary=y", []byte("junk")))
	// Another multipart type is another request.
	mixed := "multipart/mixed" + ct1[len("multipart/form-data"):]
	require.NotEqual(t, fp(ct1, b1), fp(mixed, b1))
}

// Content-Type sent twice counts both: by the first alone, a retry that
// added a second (which an upstream may read instead) replayed the first
// request's answer. Sent once, the fingerprint is as it always was.
func TestFingerprintCountsEveryContentType(t *testing.T) {
	body := []byte(`{"amount":1}`)
	r := httptest.NewRequest("POST", "/pay", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	once, err := middleware.DefaultFingerprint(r, "POST /pay", body)
	require.NoError(t, err)
	r.Header.Add("Content-Type", "text/plain")
	twice, err := middleware.DefaultFingerprint(r, "POST /pay", body)
	require.NoError(t, err)
	require.NotEqual(t, once, twice)
}

// An application that picks the account a request acts on by a header (or
// by Host) had one account's answer replayed to a request for another
// that sent the same key: no header but Content-Type counts by default.
// HeaderFingerprint makes the named ones count, and leaves the
// fingerprint of a request without them as it was.
func TestHeaderFingerprint(t *testing.T) {
	body := []byte(`{"amount":1}`)
	fp := middleware.HeaderFingerprint(middleware.DefaultFingerprint, "x-account", "Host")
	req := func(host string, hdr ...string) *http.Request {
		r := httptest.NewRequest("POST", "/pay", bytes.NewReader(body))
		r.Host = host
		r.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	sum := func(f func(*http.Request, string, []byte) (string, error), r *http.Request) string {
		s, err := f(r, "POST /pay", body)
		require.NoError(t, err)
		return s
	}
	a1 := sum(fp, req("shop.example", "X-Account", "acct_1"))
	require.Equal(t, a1, sum(fp, req("SHOP.example", "X-Account", "acct_1")), "a host's case does not count")
	require.NotEqual(t, a1, sum(fp, req("shop.example", "X-Account", "acct_2")), "another account")
	require.NotEqual(t, a1, sum(fp, req("other.example", "X-Account", "acct_1")), "another host")
	require.NotEqual(t, a1, sum(fp, req("shop.example")), "no account")
	require.NotEqual(t, a1, sum(fp, req("shop.example", "X-Account", "acct_1", "X-Account", "acct_2")), "two accounts")
	require.NotEqual(t, a1, sum(middleware.DefaultFingerprint, req("shop.example", "X-Account", "acct_1")))

	// A request without the named headers keeps its fingerprint.
	only := middleware.HeaderFingerprint(middleware.DefaultFingerprint, "X-Account")
	r := req("shop.example")
	require.Equal(t, sum(middleware.DefaultFingerprint, r), sum(only, r))
	require.NotEqual(t, sum(only, r), sum(only, req("shop.example", "X-Account", "")), "an empty value is a value")

	// The names are a set: two proxies given --fingerprint-header
	// X-Account,Host and Host,X-Account in front of one store gave one
	// request two fingerprints, and a retry through the other got 422.
	both := req("shop.example", "X-Account", "acct_1")
	require.Equal(t, a1, sum(middleware.HeaderFingerprint(middleware.DefaultFingerprint, "Host", "X-Account"), both), "another order")
	require.Equal(t, a1, sum(middleware.HeaderFingerprint(middleware.DefaultFingerprint, "host", "X-Account", "x-account"), both), "a name twice")
}

// A multipart body is parsed for its fingerprint before the claim, from
// any caller (a made-up credential is a principal), and was bounded by the
// body limit alone: 1 MiB of empty parts ("--b\r\n\r\n\r\n", 116,000 of
// them) took about a million allocations and 160 ms of CPU to fingerprint,
// against 10 allocations and 1 ms for the same bytes hashed whole. As Go's
// own ParseMultipartForm, a body of more than 1000 parts, or 10,000 part
// headers in all, is fingerprinted whole (its boundary counts again).
func TestHostileMultipartIsFingerprintedWhole(t *testing.T) {
	fp := func(ct string, body []byte) string {
		r := httptest.NewRequest("POST", "/upload", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		s, err := middleware.DefaultFingerprint(r, "POST /upload", body)
		require.NoError(t, err)
		return s
	}
	var b bytes.Buffer
	for b.Len() < 1<<20-16 {
		b.WriteString("--b\r\n\r\n\r\n")
	}
	b.WriteString("--b--\r\n")
	allocs := testing.AllocsPerRun(1, func() { fp("multipart/form-data; boundary=b", b.Bytes()) })
	require.Less(t, allocs, 50000.0, "allocations to fingerprint 1 MiB of empty parts")

	var headers bytes.Buffer
	headers.WriteString("--b\r\n")
	for i := range 9000 {
		fmt.Fprintf(&headers, "H%d: v\r\n", i)
	}
	headers.WriteString("\r\n\r\n")
	hb := bytes.Repeat(headers.Bytes(), 10)
	hb = append(hb, "--b--\r\n"...)
	allocs = testing.AllocsPerRun(1, func() { fp("multipart/form-data; boundary=b", hb) })
	require.Less(t, allocs, 50000.0, "allocations to fingerprint parts of 9000 headers each")

	// A form of 1000 fields is still the same request made anew.
	fields := make([]string, 0, 2000)
	for i := range 1000 {
		fields = append(fields, fmt.Sprint("f", i), "v")
	}
	ct1, b1 := multipartRequest(t, fields...)
	ct2, b2 := multipartRequest(t, fields...)
	require.Equal(t, fp(ct1, b1), fp(ct2, b2))
}

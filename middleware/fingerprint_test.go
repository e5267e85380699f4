package middleware_test

import (
	"bytes"
	"mime/multipart"
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

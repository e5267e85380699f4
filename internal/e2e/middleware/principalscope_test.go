package e2emiddleware_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// Under the store's --scope principal a key is one record across
// endpoints, and the store replays it to a claim from another endpoint
// whose fingerprint matches. A Fingerprint of the body alone (a canonical
// JSON form, as the Options doc suggests writing) made a refund sent with
// the key and body of an earlier payment a replay of the payment's 201:
// the refund never ran, and its caller was told it had. A record of
// another endpoint is a key used with another request: 422.
func TestPrincipalScopeKeyOfAnotherEndpointIsNotReplayed(t *testing.T) {
	var payments atomic.Int32
	send, refunds := paymentsAndRefunds(t, func(w http.ResponseWriter, r *http.Request) {
		payments.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"object":"payment"}`)
	})
	resp, b := send("/payments")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	resp, b = send("/refunds")
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "a refund was answered with the payment's stored answer: %s", b)
	require.Contains(t, b, "fingerprint_mismatch")
	resp, b = send("/payments")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get(middleware.HeaderReplayed))
	require.Contains(t, b, "payment")
	require.Equal(t, int32(1), payments.Load())
	require.Zero(t, refunds.Load())
}

// The same key and body sent to another endpoint after the first
// request's handler failed (its record released, failed) took the record
// over under --scope principal: the refund ran and its answer was stored
// in the payment's record, whose endpoint the store keeps. The payment's
// retry was then replayed the refund's 201 (the payment never ran), and
// the refund's retry was refused 422. A claim that takes over a record of
// another endpoint is released and answered 422, as its replay is.
func TestPrincipalScopeKeyOfAnotherEndpointIsNotTakenOver(t *testing.T) {
	var payments atomic.Int32
	send, refunds := paymentsAndRefunds(t, func(w http.ResponseWriter, r *http.Request) {
		if payments.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // released: the key may be tried again
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"object":"payment"}`)
	})
	resp, b := send("/payments")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
	resp, b = send("/refunds")
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "the refund took the payment's record over: %s", b)
	require.Contains(t, b, "fingerprint_mismatch")
	require.Zero(t, refunds.Load())
	resp, b = send("/payments")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	require.Contains(t, b, "payment", "the payment's retry was answered another request's answer")
	require.Empty(t, resp.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, int32(2), payments.Load())
}

// paymentsAndRefunds serves POST /payments with payment and POST /refunds
// (a 201, counted in refunds) behind the middleware, on a store under
// --scope principal, with a Fingerprint of the body alone. send posts the
// same key and body to path, as the same caller.
func paymentsAndRefunds(t *testing.T, payment http.HandlerFunc) (send func(path string) (*http.Response, string), refunds *atomic.Int32) {
	t.Helper()
	store, err := client.New(idemtest.Start(t, idemtest.Options{PrincipalScope: true}).URL)
	require.NoError(t, err)
	idem, err := middleware.New(middleware.Options{Store: store,
		Fingerprint: func(r *http.Request, endpoint string, body []byte) (string, error) {
			sum := sha256.Sum256(body)
			return hex.EncodeToString(sum[:]), nil
		}})
	require.NoError(t, err)
	refunds = new(atomic.Int32)
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem(payment))
	mux.Handle("POST /refunds", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refunds.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"object":"refund"}`)
	})))
	srv := newServer(t, mux)
	t.Cleanup(srv.Close)
	return func(path string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":100}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-1")
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}, refunds
}

package e2emiddleware_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// env is a real store with a middleware in front of a handler.
type env struct {
	t     *testing.T
	store *client.Client
	url   string
}

func newEnv(t *testing.T, o middleware.Options, h http.Handler) *env {
	t.Helper()
	if o.Store == nil {
		node := idemtest.Start(t, idemtest.Options{})
		store, err := client.New(node.URL)
		require.NoError(t, err)
		o.Store = store
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Principal == nil {
		// These tests send no credential; TestNoCredentialIsRefused is
		// about the default.
		o.Principal = middleware.AnonymousPrincipal
	}
	idem, err := middleware.New(o)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", idem(h))
	srv := newServer(t, mux)
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL}
	e.store, _ = o.Store.(*client.Client)
	return e
}

// newServer serves h on the test's loopback address (IDEM_TEST_IP on a
// shared machine, else 127.0.0.1), as idemtest's store does.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(idemtest.IP(), "0"))
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (e *env) post(path, key, body string) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func problemCode(t *testing.T, a answer) string {
	t.Helper()
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal([]byte(a.body), &p), a.body)
	return p.Code
}

// A panicking handler releases its claim before the panic goes on, so a
// retry runs again, as attempt 2.
func TestPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	var attempts []int
	var mu sync.Mutex
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := middleware.FromContext(r.Context())
		require.True(t, ok)
		require.NotEmpty(t, a.Token)
		mu.Lock()
		attempts = append(attempts, a.Number)
		mu.Unlock()
		if runs.Add(1) == 1 {
			panic(http.ErrAbortHandler) // the server closes the connection
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req, _ := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", `"p1"`)
	req.Header.Set("Content-Type", "application/json")
	_, err := http.DefaultClient.Do(req)
	require.Error(t, err, "the aborted answer never arrives")
	require.Equal(t, http.StatusCreated, e.post("/pay", `"p1"`, "{}").status)
	require.Equal(t, int32(2), runs.Load())
	require.Equal(t, []int{1, 2}, attempts, "the retry is attempt 2: the fencing number grew")
}

// An operator deleting the record (or another attempt taking it over) makes
// the next extension fail: the handler's context ends with ErrLeaseLost.
func TestLostLeaseCancelsTheHandler(t *testing.T) {
	t.Parallel()
	started := make(chan middleware.Attempt, 1)
	cause := make(chan error, 1)
	// (A 1 s lease, not 300 ms: at load 16 an extension came back after
	// 300 ms, the lease was lost before the delete, and the record was
	// already completed.)
	e := newEnv(t, middleware.Options{Lease: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.FromContext(r.Context())
		started <- a
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(10 * time.Second):
			cause <- nil
		}
		w.WriteHeader(http.StatusConflict)
	}))
	done := make(chan answer, 1)
	go func() { done <- e.post("/long", `"l1"`, "{}") }()
	a := <-started
	// The handler outlives its lease: the extensions keep it.
	time.Sleep(2 * time.Second)
	rec, err := e.store.Get(context.Background(), a.Principal, a.Endpoint, a.Key, "")
	require.NoError(t, err)
	require.Equal(t, client.StateInProgress, rec.State)
	_, err = e.store.Delete(context.Background(), a.Principal, a.Endpoint, a.Key)
	require.NoError(t, err)
	require.ErrorIs(t, <-cause, middleware.ErrLeaseLost)
	<-done
}

func TestReauthorizeGuardsReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, middleware.Options{
		Principal: middleware.HeaderPrincipal("X-Tenant"),
		Reauthorize: func(r *http.Request, rec *client.Record) error {
			if r.Header.Get("X-Role") == "revoked" {
				return errors.New("the caller's role was revoked")
			}
			return nil
		},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	do := func(role, tenant string) answer {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "r1")
		req.Header.Set("X-Role", role)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	require.Equal(t, http.StatusCreated, do("admin", "t1").status)
	a := do("revoked", "t1")
	require.Equal(t, http.StatusForbidden, a.status)
	require.Equal(t, "reauthorization_failed", problemCode(t, a))
	require.Equal(t, "true", do("admin", "t1").header.Get("Idempotency-Replayed"))
	a = do("admin", "")
	require.Equal(t, http.StatusUnauthorized, a.status, "no principal")
	require.Equal(t, "unauthorized", problemCode(t, a))
}

// WaitInProgress turns a concurrent duplicate's 409 into the first
// attempt's answer.
func TestWaitInProgressReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{WaitInProgress: 5 * time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(400 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	}))
	first := make(chan answer, 1)
	go func() { first <- e.post("/w", "w1", "{}") }()
	for runs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	second := e.post("/w", "w1", "{}")
	require.Equal(t, http.StatusCreated, second.status, second.body)
	require.Equal(t, "run 1", second.body)
	require.Equal(t, "true", second.header.Get("Idempotency-Replayed"))
	require.Equal(t, "run 1", (<-first).body)
	require.Equal(t, int32(1), runs.Load())
}

func TestFailOpenRunsTheHandlerWithoutTheStore(t *testing.T) {
	t.Parallel()
	store, err := client.New("127.0.0.1:1") // nothing listens on port 1
	require.NoError(t, err)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) })
	closed := newEnv(t, middleware.Options{Store: store, StoreTimeout: 300 * time.Millisecond}, h)
	a := closed.post("/p", "f1", "{}")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, "unavailable", problemCode(t, a))
	require.Equal(t, int32(0), runs.Load(), "fail closed: the handler does not run")
	open := newEnv(t, middleware.Options{Store: store, FailOpen: true, StoreTimeout: 300 * time.Millisecond}, h)
	require.Equal(t, http.StatusCreated, open.post("/p", "f1", "{}").status)
	require.Equal(t, int32(1), runs.Load())
}

// A store that refuses the middleware's credentials is a misconfiguration,
// not an outage: the request is refused and the handler does not run,
// even with FailOpen (which would otherwise run every request unprotected).
func TestStoreCredentialsRefusedNeverRunsTheHandler(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{AuthTokens: []string{"the-right-token"}})
	store, err := client.New(node.URL, client.WithToken("a-wrong-token"))
	require.NoError(t, err)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) })
	for _, failOpen := range []bool{false, true} {
		e := newEnv(t, middleware.Options{Store: store, FailOpen: failOpen, StoreTimeout: 2 * time.Second}, h)
		a := e.post("/p", "cred-"+fmt.Sprint(failOpen), "{}")
		require.Equal(t, http.StatusServiceUnavailable, a.status, "FailOpen %v", failOpen)
		require.Equal(t, "unavailable", problemCode(t, a))
		require.Equal(t, int32(0), runs.Load(), "FailOpen %v: the handler must not run", failOpen)
	}
}

// The endpoint of a ServeMux route is its pattern: two payments under
// /payments/{id} with one key are one record.
func TestEndpointIsTheRoutePattern(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	idem, err := middleware.New(middleware.Options{Store: store, Principal: middleware.AnonymousPrincipal})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /payments/{id}/capture", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})))
	srv := newServer(t, mux)
	defer srv.Close()
	e := &env{t: t, url: srv.URL, store: store}
	require.Equal(t, http.StatusOK, e.post("/payments/p1/capture", "c1", "{}").status)
	rec, err := store.Get(context.Background(), "anonymous", "POST /payments/{id}/capture", "c1", "")
	require.NoError(t, err)
	require.Equal(t, client.StateCompleted, rec.State)
	// Another id under the same key is another request of the same
	// endpoint: its fingerprint differs.
	require.Equal(t, http.StatusUnprocessableEntity, e.post("/payments/p2/capture", "c1", "{}").status)
}

// A custom fingerprint that ignores JSON member order makes a reordered
// body the same request.
func TestFingerprintHook(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{Fingerprint: func(r *http.Request, endpoint string, body []byte) (string, error) {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return "", fmt.Errorf("the body is not JSON: %w", err)
		}
		canon, _ := json.Marshal(v) // maps marshal with sorted keys
		return middleware.DefaultFingerprint(r, endpoint, canon)
	}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) }))
	require.Equal(t, http.StatusCreated, e.post("/p", "j1", `{"a":1,"b":2}`).status)
	a := e.post("/p", "j1", `{"b":2, "a":1}`)
	require.Equal(t, "true", a.header.Get("Idempotency-Replayed"))
	require.Equal(t, int32(1), runs.Load())
	bad := e.post("/p", "j2", `not json`)
	require.Equal(t, http.StatusBadRequest, bad.status)
	require.Equal(t, "invalid_request", problemCode(t, bad))
}

// A hijacked connection (a WebSocket upgrade, say) is the handler's: the
// claim is released rather than a made-up answer stored.
func TestHijackReleases(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		c, rw, err := http.NewResponseController(w).Hijack()
		require.NoError(t, err)
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		rw.Flush()
		c.Close()
	}))
	send := func() int {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /ws HTTP/1.1\r\nHost: x\r\nIdempotency-Key: h1\r\nContent-Length: 0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, send())
	// The release follows the handler's return, which the client may beat.
	require.Eventually(t, func() bool { return send() == http.StatusOK }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, int32(2), runs.Load(), "the retry ran again")
}

func TestOversizedRequestBodyIs413(t *testing.T) {
	t.Parallel()
	e := newEnv(t, middleware.Options{MaxBodyBytes: 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	}))
	a := e.post("/p", "b1", strings.Repeat("x", 11))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.status)
	require.Equal(t, "request_too_large", problemCode(t, a))
}

// A client that goes away does not end the attempt's lease while the
// handler still runs: a duplicate arriving after several leases gets 409,
// not a second run, and then the first answer.
func TestLeaseOutlivesTheClientsDisconnect(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	e := newEnv(t, middleware.Options{Lease: 300 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(1500 * time.Millisecond) // a payment that commits whatever the client does
		w.WriteHeader(http.StatusCreated)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/pay", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "d1")
	_, err := http.DefaultClient.Do(req)
	require.Error(t, err)
	time.Sleep(900 * time.Millisecond) // three leases after the disconnect
	dup := e.post("/pay", "d1", "{}")
	require.Equal(t, http.StatusConflict, dup.status, dup.body)
	require.Eventually(t, func() bool {
		a := e.post("/pay", "d1", "{}")
		return a.status == http.StatusCreated && a.header.Get("Idempotency-Replayed") == "true"
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, int32(1), runs.Load())
}

// A Batcher whose batches exceed the store's --max-batch-ops gets them
// refused whole (413): it sends them again in halves, and whatever the
// store answers, one Idempotency-Key runs the handler once, with FailOpen
// too (a 413 was taken for an outage and every request ran unprotected).
func TestBatcherAboveTheStoresBatchLimit(t *testing.T) {
	t.Parallel()
	node := idemtest.Start(t, idemtest.Options{MaxBatchOps: 4})
	c, err := client.New(node.URL)
	require.NoError(t, err)
	b := c.NewBatcher(client.BatcherConfig{MaxOps: 64, Linger: 5 * time.Millisecond})
	t.Cleanup(func() { b.Close() })
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	e := newEnv(t, middleware.Options{Store: b, FailOpen: true, StoreTimeout: 5 * time.Second}, h)
	var wg sync.WaitGroup
	statuses := make([]int, 40)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.post("/p", "over-the-limit", "{}").status
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), runs.Load(), "statuses %v", statuses)
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, s, "statuses %v", statuses)
	}
}

// By default a keyed request without Authorization is refused and its
// handler never runs: callers who present no credential would share one
// tenant, and a stored answer (its Set-Cookie too) would be replayed to
// whoever sends the same key. Two credentials are two tenants; with
// AnonymousPrincipal, credential-less callers share one on purpose.
func TestNoCredentialIsRefused(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		http.SetCookie(w, &http.Cookie{Name: "session", Value: fmt.Sprint("s", n)})
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	send := func(url, authorization string) answer {
		req, err := http.NewRequest(http.MethodPost, url+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"order-77"`)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}
	serve := func(o middleware.Options) string {
		o.Store = store
		idem, err := middleware.New(o)
		require.NoError(t, err)
		srv := newServer(t, idem(h))
		t.Cleanup(srv.Close)
		return srv.URL
	}

	def := serve(middleware.Options{})
	a := send(def, "")
	require.Equal(t, http.StatusUnauthorized, a.status, "%+v", a)
	require.Contains(t, a.body, "Authorization")
	require.Zero(t, runs.Load(), "the handler ran for a request without a credential")
	alice, bob := send(def, "Bearer alice"), send(def, "Bearer bob")
	require.Equal(t, http.StatusCreated, alice.status, "%+v", alice)
	require.Equal(t, http.StatusCreated, bob.status, "%+v", bob)
	require.NotEqual(t, alice.body, bob.body, "bob was handed alice's answer for the same key")
	require.Empty(t, bob.header.Get("Idempotency-Replayed"))

	anon := serve(middleware.Options{Principal: middleware.AnonymousPrincipal})
	first, second := send(anon, ""), send(anon, "")
	require.Equal(t, http.StatusCreated, first.status, "%+v", first)
	require.Equal(t, first.body, second.body, "AnonymousPrincipal shares one tenant")
	require.Equal(t, "true", second.header.Get("Idempotency-Replayed"))
}

// Two Authorization headers: the principal was the first one's hash, so an
// attacker who put a shared guest credential first and their own second (a
// service that authenticates with the last) had their answer stored, and
// replayed, under the guest's principal. Refused (401), the handler not run,
// by the default principal and by AnonymousPrincipal.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{})
	store, err := client.New(node.URL)
	require.NoError(t, err)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	for _, principal := range []func(*http.Request) (string, error){nil, middleware.AnonymousPrincipal} {
		idem, err := middleware.New(middleware.Options{Store: store, Principal: principal})
		require.NoError(t, err)
		srv := newServer(t, idem(h))
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"order-78"`)
		req.Header.Add("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
		req.Header.Add("Authorization", "Bearer attacker")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", b)
		require.Contains(t, string(b), "Authorization header 2 times")
	}
	require.Zero(t, runs.Load(), "the handler ran for a request with two credentials")
}

// A keyed request whose Content-Length is over MaxBodyBytes is refused from
// its headers, as a node refuses one: it waited for a body that never came
// (idem proxy: until --body-read-timeout, then 400 invalid_request).
func TestDeclaredOversizedBodyIs413AtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, middleware.Options{MaxBodyBytes: 10}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	// Bounds the test only: without the check the server waits for ever.
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /p HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big\r\nContent-Length: 1000000000\r\n\r\nabc")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"code":"request_too_large"`)
	require.True(t, resp.Close, "the connection closes: the body is not read")
}

// The scheme of an Authorization header is case-insensitive and may be
// followed by more than one space: "bearer T" from the same caller was
// another tenant, and its retry ran the handler again (attack on the
// proxy). The canonical form keeps the hash "Bearer T" always had; the
// credential itself still tells tenants apart.
func TestAuthorizationSchemeCaseIsOneCaller(t *testing.T) {
	principal := func(v string) string {
		r := httptest.NewRequest(http.MethodPost, "/pay", nil)
		r.Header.Set("Authorization", v)
		p, err := middleware.AuthorizationPrincipal(r)
		require.NoError(t, err, v)
		return p
	}
	sum := sha256.Sum256([]byte("Bearer T"))
	want := "authz:" + hex.EncodeToString(sum[:16])
	for _, v := range []string{"Bearer T", "bearer T", "BEARER T", "Bearer  T", "Bearer\tT", " Bearer T "} {
		require.Equal(t, want, principal(v), "%q", v)
	}
	require.NotEqual(t, want, principal("Bearer t"), "the credential is case-sensitive")
	require.NotEqual(t, want, principal("Bearer T2"))
	require.Equal(t, principal("garbage-1"), principal("garbage-1"))
	require.NotEqual(t, principal("garbage-1"), principal("GARBAGE-1"), "no scheme: left as it is")
}

// keyedServer serves h behind the middleware with options o over a real
// store (o.Store, when nil, a node of its own with options no), and
// returns how to send it a keyed POST with extra headers (pairs) and
// read the whole answer.
func keyedServer(t *testing.T, no idemtest.Options, o middleware.Options, h http.HandlerFunc) func(key string, hdr ...string) (*http.Response, string) {
	t.Helper()
	if o.Store == nil {
		store, err := client.New(idemtest.Start(t, no).URL)
		require.NoError(t, err)
		o.Store = store
	}
	idem, err := middleware.New(o)
	require.NoError(t, err)
	srv := newServer(t, idem(h))
	t.Cleanup(srv.Close)
	return func(key string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		req.Header.Set("Authorization", "Bearer t")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
}

// A keyed request that upgrades its connection (WebSocket) answered 101,
// the middleware released the key (the connection was hijacked), and every
// retry ran the handler again. It is refused before the handler runs.
func TestUpgradeRequestIsNotMadeIdempotent(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })
	resp, b := send("up-1", "Connection", "Upgrade", "Upgrade", "websocket")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Contains(t, b, "cannot be made idempotent")
	require.Zero(t, runs.Load())
}

// A stored body larger than the store's --max-request-bytes (MaxStoredBody
// set above it) made the complete 413 request_too_large, which was not
// taken for "too large": the record stayed in progress, and the retry ran
// the handler again once the lease ran out. The answer is stored without
// its body, as one over --max-response-bytes is.
func TestAnswerOverTheStoresRequestLimitIsStoredWithoutBody(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{MaxRequestBytes: 64 << 10, MaxResponseBytes: 1 << 20}, middleware.Options{MaxStoredBody: 1 << 20},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.Write(bytes.Repeat([]byte("x"), 200<<10))
		})
	first, _ := send("big-1")
	require.Equal(t, http.StatusOK, first.StatusCode)
	again, _ := send("big-1")
	require.Equal(t, http.StatusOK, again.StatusCode)
	require.Equal(t, "true", again.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, middleware.OmittedTooLarge, again.Header.Get(middleware.HeaderBodyOmitted))
	require.Equal(t, int32(1), runs.Load(), "the retry ran the handler again")
}

// outage passes calls to a real store, except completes while down is set:
// those fail as a store that does not answer does.
type outage struct {
	*client.Client
	down atomic.Bool
}

func (o *outage) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	if o.down.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:7070: connect: connection refused")
	}
	return o.Client.Complete(ctx, req)
}

// The store went away between a request's claim and its complete, for
// longer than StoreTimeout, and came back within the lease: the complete
// had been given up after StoreTimeout, the record stayed in progress, and
// the retry ran the handler again once the lease ran out (attack on the
// proxy: kill -9 of the store for 9 s). The complete is asked on in the
// background until the lease runs out, and the retry replays.
func TestCompleteOutlivesAStoreOutageWithinTheLease(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &outage{Client: real}
	var runs atomic.Int32
	// (StoreTimeout 1 s, not 300 ms: at load 16 the claim itself, before
	// the outage, outlasted 300 ms and was answered 503.)
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, StoreTimeout: time.Second, Lease: 10 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			store.down.Store(true) // the store goes away while the handler runs
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged once")
		})
	resp, body := send("outage-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	time.Sleep(3 * time.Second) // three StoreTimeouts: given up, before
	store.down.Store(false)
	require.Eventually(t, func() bool {
		resp, body := send("outage-1")
		return resp.StatusCode == http.StatusCreated && body == "charged once" && resp.Header.Get(middleware.HeaderReplayed) == "true"
	}, 10*time.Second, 100*time.Millisecond, "the retry replays")
	require.Equal(t, int32(1), runs.Load(), "the retry ran the handler again")
}

// A handler's 429 (a rate limiter in front of the work) was stored and
// replayed to every retry for the whole retention, each replay telling
// the client to retry (attack on idem proxy). 408, 425 and 429 say "not
// now": released as a 5xx is, the retry runs; other 4xx are still stored.
func TestNotNowAnswersAreNotStored(t *testing.T) {
	var runs, status atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(int(status.Load()))
	})
	for _, st := range []int{http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusTooEarly} {
		runs.Store(0)
		status.Store(int32(st))
		key := fmt.Sprint("not-now-", st)
		first, _ := send(key)
		require.Equal(t, st, first.StatusCode)
		status.Store(http.StatusCreated)
		again, _ := send(key)
		require.Equal(t, http.StatusCreated, again.StatusCode, "%d was replayed", st)
		require.Empty(t, again.Header.Get(middleware.HeaderReplayed))
		require.Equal(t, int32(2), runs.Load())
	}
	runs.Store(0)
	status.Store(http.StatusNotFound)
	send("stored-404")
	status.Store(http.StatusCreated)
	again, _ := send("stored-404")
	require.Equal(t, http.StatusNotFound, again.StatusCode, "a 404 is an answer: replayed")
	require.Equal(t, int32(1), runs.Load())
}

// Bug: the endpoint was the path as the client escaped it, so a retry to
// /%70ay of a key first sent to /pay (one route to every server) was a new
// endpoint and ran the handler again. Escapes are normalized as RFC 3986
// allows; an escaped slash stays apart from a slash.
func TestPathEscapesAreOneEndpoint(t *testing.T) {
	store, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	idem, err := middleware.New(middleware.Options{Store: store})
	require.NoError(t, err)
	var runs atomic.Int32
	srv := newServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "run %d", runs.Add(1))
	})))
	t.Cleanup(srv.Close)
	send := func(path, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/pay", "/%70ay", "/p%61%79", "/%70%61%79"} {
		code, body := send(path, "esc-1")
		require.Equal(t, 200, code, "%s: %s", path, body)
		require.Equal(t, "run 1", body, "%s ran again", path)
	}
	for _, path := range []string{"/a%2fb", "/a%2Fb"} {
		code, body := send(path, "esc-2")
		require.Equal(t, 200, code, "%s: %s", path, body)
		require.Equal(t, "run 2", body, "%s ran again", path)
	}
	code, body := send("/a/b", "esc-2")
	require.Equal(t, 200, code, "%s", body)
	require.Equal(t, "run 3", body, "/a/b is not /a%2Fb")
}

// Bug: a handler's answer with a header the store refuses (a control
// character in a value or in Content-Type, a name that is no HTTP token)
// was refused whole by the store: the caller had its 201, the record
// stayed in progress, and the retry ran the handler again once the lease
// ran out. Such headers are left out of the stored copy; the rest is
// replayed.
func TestHeadersTheStoreRefusesAreLeftOut(t *testing.T) {
	var runs atomic.Int32
	var addr string
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Lease: time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 && r.Header.Get("Idempotency-Key") == `"addr"` {
				addr = r.Host // the probe below
				return
			}
			w.Header().Set("X-Debug", "a\x01b")
			w.Header().Set("Content-Type", "text/plain\x01")
			w.Header()["X Bad"] = []string{"v"}
			w.Header().Add("X-Two", "ok")
			w.Header().Add("X-Two", "b\x7fad")
			w.Header().Set("X-Ok", "kept")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged")
		})
	send("addr")
	runs.Store(0)
	// The caller's own answer does not parse in Go's client ("malformed
	// MIME header line"): it is sent and read raw, as curl would.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: \"hdr-1\"\r\nAuthorization: Bearer t\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", addr)
	first, _ := io.ReadAll(conn)
	conn.Close()
	require.Contains(t, string(first), "HTTP/1.1 201")
	time.Sleep(1500 * time.Millisecond) // past the lease: a record left in progress is taken over
	again, body := send("hdr-1")
	require.Equal(t, http.StatusCreated, again.StatusCode, body)
	require.Equal(t, "charged", body)
	require.Equal(t, "true", again.Header.Get(middleware.HeaderReplayed))
	require.Equal(t, "kept", again.Header.Get("X-Ok"))
	require.Equal(t, []string{"ok"}, again.Header.Values("X-Two"))
	require.Empty(t, again.Header.Get("X-Debug"))
	require.Equal(t, int32(1), runs.Load(), "the retry ran the handler again")
}

// Bug: the caller going away cancelled the handler's context; a handler
// that stopped on it without writing had an empty 200 stored, and the
// retry was told the payment succeeded though it never ran. As the proxy
// does, the middleware lets the handler finish; its answer is replayed.
func TestCallerLeavingDoesNotCancelTheHandler(t *testing.T) {
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-r.Context().Done():
			return // gave up: writes nothing
		case <-time.After(700 * time.Millisecond):
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	srvURL := func() string { // keyedServer posts to /pay on its own server: find it by a first request
		resp, _ := send("leave-probe")
		return resp.Request.URL.String()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srvURL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", `"leave-1"`)
	req.Header.Set("Authorization", "Bearer t")
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err, "the caller gives up first")
	require.Eventually(t, func() bool {
		resp, body := send("leave-1")
		return resp.StatusCode == http.StatusCreated && body == "charged" && resp.Header.Get(middleware.HeaderReplayed) == "true"
	}, 10*time.Second, 100*time.Millisecond, "the retry replays what the handler answered")
	require.Equal(t, int32(2), runs.Load(), "the probe and leave-1, each once")
}

// Bug: a complete the store did not answer was asked again only until the
// lease ran out by the wall clock; a store away longer (kill -9, restarted
// 35 s later, its clock standing still meanwhile) found the record in
// progress, and the retry ran the handler again once the lease ran out by
// the store's clock. A complete with the attempt's token succeeds until a
// retry takes the key over: it is asked for much longer than the lease.
func TestCompleteOutlivesAStoreOutageLongerThanTheLease(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &outage{Client: real}
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, StoreTimeout: 200 * time.Millisecond, Lease: time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			store.down.Store(true)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged once")
		})
	resp, body := send("long-outage-1")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	time.Sleep(2500 * time.Millisecond) // 2.5 leases, and no retry meanwhile
	store.down.Store(false)
	probe := httptest.NewRequest(http.MethodPost, "/pay", nil)
	probe.Header.Set("Authorization", "Bearer t")
	principal, err := middleware.AuthorizationPrincipal(probe)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, err := real.Get(context.Background(), principal, "POST /pay", "long-outage-1", "")
		return err == nil && rec.State == client.StateCompleted
	}, 15*time.Second, 200*time.Millisecond, "the complete stored once the store is back")
	again, body := send("long-outage-1")
	require.Equal(t, http.StatusCreated, again.StatusCode, body)
	require.Equal(t, "charged once", body)
	require.Equal(t, int32(1), runs.Load(), "the retry ran the handler again")
}

// lostClaims passes calls to a real store, but while lose is set a claim's
// answer is lost after the store applied it: a stalled store (SIGSTOP)
// that applies the claim once it resumes, after the middleware gave up.
type lostClaims struct {
	*client.Client
	lose atomic.Bool
}

func (l *lostClaims) Claim(ctx context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	res, err := l.Client.Claim(ctx, req)
	if l.lose.Load() {
		return nil, errors.New("read tcp 127.0.0.1:51234->127.0.0.1:7070: i/o timeout")
	}
	return res, err
}

// A claim the store applied but whose answer never came (the store stalled
// past StoreTimeout): the caller got 503, and its retry answered 409
// in_progress for the whole lease although nothing ran (attack on the
// middleware: SIGSTOP of the store). The middleware asks the claim again
// with its claim_id once the store answers, and releases it.
func TestUnansweredClaimIsReleased(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &lostClaims{Client: real}
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, StoreTimeout: 300 * time.Millisecond, Lease: time.Minute},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged")
		})
	store.lose.Store(true)
	resp, body := send("lost-claim-1")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Equal(t, int32(0), runs.Load())
	store.lose.Store(false)

	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, body := send("lost-claim-1")
		if resp.StatusCode == http.StatusCreated {
			break
		}
		require.True(t, time.Now().Before(deadline), "the retry is let in long before the minute's lease runs out; last answer: %d %s", resp.StatusCode, body)
	}
	require.Equal(t, int32(1), runs.Load(), "the handler ran once, for the retry")

	probe := httptest.NewRequest(http.MethodPost, "/pay", nil)
	probe.Header.Set("Authorization", "Bearer t")
	principal, err := middleware.AuthorizationPrincipal(probe)
	require.NoError(t, err)
	rec, err := real.Get(context.Background(), principal, "POST /pay", "lost-claim-1", "")
	require.NoError(t, err)
	require.Equal(t, client.StateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt, "the lost claim was attempt 1, released")
}

// A handler that ends only on its context (a long poll, a stream) ran for
// ever once its caller left, since the caller's going does not cancel it:
// its lease was extended for ever and every retry answered 409 (a review).
// CallerGoneTimeout after the caller left it is cancelled with
// ErrCallerGone; one that then returns without writing has its key
// released, and the retry runs.
func TestHandlerOfACallerLongGoneIsCancelled(t *testing.T) {
	var runs atomic.Int32
	causes := make(chan error, 1)
	store, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	idem, err := middleware.New(middleware.Options{Store: store, Lease: 1500 * time.Millisecond, CallerGoneTimeout: time.Second, Principal: middleware.AnonymousPrincipal})
	require.NoError(t, err)
	srv := newServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-r.Context().Done() // a long poll: nothing to say yet
			causes <- context.Cause(r.Context())
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "polled")
	})))
	t.Cleanup(srv.Close)
	// The caller gives up once the handler runs: with a fixed 150 ms, a
	// loaded machine's first claim outran it and the handler never ran.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for runs.Load() == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/poll", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "poll-1")
	req.Header.Set("Content-Type", "application/json") // as e.post sends it: the same request
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err, "the caller gives up first")
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, middleware.ErrCallerGone)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still runs 10 s after its caller left (CallerGoneTimeout 1 s)")
	}
	e := &env{t: t, url: srv.URL}
	require.Eventually(t, func() bool {
		a := e.post("/poll", "poll-1", "{}")
		return a.status == http.StatusCreated && a.body == "polled" && a.header.Get(middleware.HeaderReplayed) == ""
	}, 10*time.Second, 100*time.Millisecond, "the key was released, not an empty 200 stored: the retry runs")
	require.Equal(t, int32(2), runs.Load())
}

// stalled holds every Complete until open is closed: a store that stopped
// answering after the claim.
type stalled struct {
	*client.Client
	open chan struct{}
}

func (s *stalled) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	select {
	case <-s.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Client.Complete(ctx, req)
}

// Bug (a review): the answer went to the caller as the handler wrote it,
// without a length, so it ended only when the middleware returned, after
// the complete: a store that went away after the claim kept the caller
// waiting StoreTimeout (a minute here) for the end of an answer it already
// had. The answer is held and sent whole, with its length, once stored or
// after a second; the complete still stores it, and the retry replays it.
func TestCallerHasItsAnswerBeforeTheComplete(t *testing.T) {
	real, err := client.New(idemtest.Start(t, idemtest.Options{}).URL)
	require.NoError(t, err)
	store := &stalled{Client: real, open: make(chan struct{})}
	var runs atomic.Int32
	send := keyedServer(t, idemtest.Options{}, middleware.Options{Store: store, StoreTimeout: time.Minute, Lease: 5 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged ")
			io.WriteString(w, "once")
			w.Header().Set("X-Late", "ignored") // after the status: not sent, as net/http has it
		})
	type got struct {
		resp *http.Response
		body string
	}
	answered := make(chan got, 1)
	go func() {
		resp, body := send("held-1")
		answered <- got{resp, body}
	}()
	var a got
	select {
	case a = <-answered:
	case <-time.After(30 * time.Second):
		close(store.open)
		t.Fatal("the caller had no whole answer while the complete waited for the store")
	}
	require.Equal(t, http.StatusCreated, a.resp.StatusCode)
	require.Equal(t, "charged once", a.body)
	require.Equal(t, "12", a.resp.Header.Get("Content-Length"))
	require.Empty(t, a.resp.Header.Get("X-Late"))
	require.Equal(t, "text/plain", a.resp.Header.Get("Content-Type"))
	close(store.open)
	require.Eventually(t, func() bool {
		resp, body := send("held-1")
		return resp.StatusCode == http.StatusCreated && body == "charged once" && resp.Header.Get(middleware.HeaderReplayed) == "true"
	}, 10*time.Second, 50*time.Millisecond, "the retry replays the stored answer")
	require.Equal(t, int32(1), runs.Load())
}

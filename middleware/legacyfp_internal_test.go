package middleware

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// fpStore is a memStore that keeps each key's fingerprint and refuses a
// claim with another one (422 fingerprint_mismatch), as a node does.
type fpStore struct {
	mu     sync.Mutex
	fp     map[string]string
	stored map[string]*client.Response
	claims []string // the fingerprint of every claim asked
}

func (s *fpStore) put(key, fp string, resp client.Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fp == nil {
		s.fp, s.stored = map[string]string{}, map[string]*client.Response{}
	}
	s.fp[key], s.stored[key] = fp, &resp
}

func (s *fpStore) Claim(_ context.Context, req client.ClaimRequest) (*client.ClaimResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, req.Fingerprint)
	if s.fp == nil {
		s.fp, s.stored = map[string]string{}, map[string]*client.Response{}
	}
	if fp, ok := s.fp[req.Key]; ok {
		if fp != req.Fingerprint {
			return nil, &client.Problem{Status: http.StatusUnprocessableEntity, Code: client.CodeFingerprintMismatch}
		}
		if resp := s.stored[req.Key]; resp != nil {
			return &client.ClaimResponse{Outcome: client.OutcomeReplay, Record: &client.Record{
				Principal: req.Principal, Endpoint: req.Endpoint, Key: req.Key, State: client.StateCompleted, Response: resp}}, nil
		}
		return nil, &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
	}
	s.fp[req.Key] = req.Fingerprint
	return &client.ClaimResponse{Outcome: client.OutcomeClaimed, Token: "tok", Attempt: 1}, nil
}

func (s *fpStore) Complete(_ context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := req.Response
	s.stored[req.Key] = &resp
	return &client.CompleteResponse{}, nil
}

func (s *fpStore) Release(_ context.Context, req client.ReleaseRequest) (*client.ReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fp, req.Key)
	return &client.ReleaseResponse{}, nil
}

func (s *fpStore) Extend(context.Context, client.ExtendRequest) (*client.ExtendResponse, error) {
	return &client.ExtendResponse{}, nil
}

// releaseFingerprint is DefaultFingerprint as the release before the
// multipart change computed it: the first Content-Type and the body
// whole, boundary and all.
func releaseFingerprint(method, path, query, ct string, body []byte) string {
	var fields []byte
	for _, f := range [][]byte{[]byte(method), []byte(path), []byte(query), []byte(ct), body} {
		fields = binary.BigEndian.AppendUint64(fields, uint64(len(f)))
		fields = append(fields, f...)
	}
	sum := sha256.Sum256(fields)
	return hex.EncodeToString(sum[:])
}

// A multipart request stored by the release before the multipart change
// has the fingerprint of its whole body, boundary included. Its client
// resending the same bytes after the upgrade (Go's GetBody, urllib3's
// Retry, curl --retry: the same boundary) got 422 fingerprint_mismatch
// for the retention's length, and never learned the outcome of the
// request that ran: the new fingerprint drops the boundary, so the
// middleware asks again with the one the earlier release gave it.
func TestMultipartRecordOfTheEarlierReleaseIsReplayed(t *testing.T) {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	require.NoError(t, mw.WriteField("amount", "100"))
	require.NoError(t, mw.Close())
	ct, body := mw.FormDataContentType(), form.Bytes()

	store := &fpStore{}
	store.put("up-1", releaseFingerprint("POST", "/upload", "", ct, body),
		client.Response{Status: http.StatusCreated, Body: []byte("uploaded")})
	var runs atomic.Int32
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	send := func(key, ct string, body []byte) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/upload", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, key)
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := send("up-1", ct, body)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	require.Equal(t, "uploaded", string(b))
	require.Equal(t, "true", resp.Header.Get(HeaderReplayed))
	require.Zero(t, runs.Load())

	// Another request under that key is still 422, by either fingerprint.
	var other bytes.Buffer
	mw2 := multipart.NewWriter(&other)
	require.NoError(t, mw2.SetBoundary(mw.Boundary()))
	require.NoError(t, mw2.WriteField("amount", "200"))
	require.NoError(t, mw2.Close())
	resp = send("up-1", ct, other.Bytes())
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Zero(t, runs.Load())
}

// The fallback is for a multipart body alone: a request with two
// Content-Types, whose first alone the earlier release counted, must not
// be asked again by that first one, or a retry that added a second
// Content-Type is replayed the answer stored for the first alone (what
// counting every Content-Type fixed).
func TestTwoContentTypesAreNotAskedAgainByTheFirst(t *testing.T) {
	store := &fpStore{}
	body := []byte(`{"amount":1}`)
	store.put("two-ct", releaseFingerprint("POST", "/upload", "", "application/json", body),
		client.Response{Status: http.StatusCreated, Body: []byte("stored")})
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal})
	require.NoError(t, err)
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/upload", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(HeaderKey, "two-ct")
	req.Header.Add("Content-Type", "application/json")
	req.Header.Add("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
}

// The earlier fingerprint of a keyed deployment (idem proxy
// --hash-key-file) is the earlier release's HMAC, and HeaderFingerprint
// over it asks by it too.
func TestEarlierFingerprintIsKeyedAsBefore(t *testing.T) {
	var form bytes.Buffer
	w := multipart.NewWriter(&form)
	require.NoError(t, w.WriteField("amount", "100"))
	require.NoError(t, w.Close())
	ct, body := w.FormDataContentType(), form.Bytes()
	key := bytes.Repeat([]byte("k"), 32)
	r := httptest.NewRequest("POST", "/upload", bytes.NewReader(body))
	r.Header.Set("Content-Type", ct)

	var fields []byte
	for _, f := range [][]byte{[]byte("POST"), []byte("/upload"), nil, []byte(ct), body} {
		fields = binary.BigEndian.AppendUint64(fields, uint64(len(f)))
		fields = append(fields, f...)
	}
	h := hmac.New(sha256.New, key)
	h.Write(fields)
	want := hex.EncodeToString(h.Sum(nil))

	for _, fp := range []func(*http.Request, string, []byte) (string, error){
		KeyedFingerprint(key), HeaderFingerprint(KeyedFingerprint(key), "X-Account"),
	} {
		now, err := fp(r, "POST /upload", body)
		require.NoError(t, err)
		m := &mw{o: Options{Fingerprint: fp}}
		before, ok := m.earlierFingerprint(r, "POST /upload", body, now)
		require.True(t, ok)
		require.Equal(t, want, before)
	}
}

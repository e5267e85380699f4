package middleware

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// An answer stored without its body or with its status alone (complete),
// or folded and so cut (foldingListsAfter), was said in a WARN line each:
// a store of smaller limits refuses every such answer, and a client
// sending one per request (a new key each) made a line per request. Each
// is said at most every 10 s, with the count.
func TestCutAnswerWarningsAreSpaced(t *testing.T) {
	const requests = 4
	cases := []struct {
		name, line, count string
		refuse            func(req client.CompleteRequest) *client.Problem
		handler           http.HandlerFunc
	}{
		{
			name: "without-body", line: "an answer was stored without its body", count: "answers-without-body=1",
			refuse: func(req client.CompleteRequest) *client.Problem {
				if len(req.Response.Body) > 4 {
					return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge}
				}
				return nil
			},
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "a body over four bytes")
			},
		},
		{
			name: "status-alone", line: "an answer was stored with its status alone", count: "answers-status-alone=1",
			refuse: func(req client.CompleteRequest) *client.Problem {
				if req.Response.HeaderCount() > 1 || len(req.Response.Body) > 0 { // the status and the note alone go
					return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge}
				}
				return nil
			},
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", "/payments/1")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "charged")
			},
		},
		{
			name: "folded", line: "a folded answer was stored without its body", count: "folded-answers-cut=1",
			refuse: func(req client.CompleteRequest) *client.Problem {
				if len(req.Response.HeaderLists) > 0 {
					return arraysRefusedStore(8192).refuse(req)
				}
				if len(req.Response.Body) > 3 {
					return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeRequestTooLarge, Detail: "request body is larger than 1024 bytes"}
				}
				return nil
			},
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Add("Link", "</receipts/a>; rel=receipt")
				w.Header().Add("Link", "</receipts/b>; rel=receipt")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "charged")
			},
		},
	}
	defer func(d time.Duration) { foldListsAfter = d }(foldListsAfter)
	foldListsAfter = 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := &refusingStore{refuse: tc.refuse}
			var logs syncBuffer
			idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, MaxStoredBody: 1024, Lease: 3 * time.Second, StoreTimeout: 300 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			h := idem(tc.handler)
			keys := []string{"k1", "k2", "k3", "k4"}
			for _, k := range keys[:requests] {
				req, _ := http.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
				req.Header.Set(HeaderKey, k)
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			require.NoError(t, WaitCompletes(t.Context()))
			for _, k := range keys {
				resp := store.response(k)
				require.NotNil(t, resp, "%s never stored:\n%s", k, logs.String())
				require.Equal(t, []string{OmittedTooLarge}, resp.Values(HeaderBodyOmitted))
			}
			require.Equal(t, 1, strings.Count(logs.String(), tc.line), "said once per 10 s:\n%s", logs.String())
			require.Contains(t, logs.String(), tc.count, "the line counts the answers so stored")
		})
	}
}

package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/middleware"
)

// A store that answers a claim with a replay the middleware cannot send as
// it is. Bugs: a stored status outside 100-599 made the replay's
// WriteHeader panic, and the caller's connection dropped without an
// answer; a stored Content-Length (or another header of one connection,
// which the middleware never stores) was replayed as it was, and a body of
// another length broke the answer (unexpected EOF).
func TestReplayFromABrokenStore(t *testing.T) {
	for _, c := range []struct {
		name, record string
		status       int
		body         string
	}{
		{"status 0", `{"state":"completed","response":{"status":0,"body":""}}`, http.StatusServiceUnavailable, ""},
		{"status 1000", `{"state":"completed","response":{"status":1000,"body":"aGk="}}`, http.StatusServiceUnavailable, ""},
		{"connection headers", `{"state":"completed","response":{"status":200,"headers":{"Content-Length":"100","Connection":"close","Transfer-Encoding":"gzip","X-Kept":"yes"},"body":"aGk="}}`, http.StatusOK, "hi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"outcome":"replay","record":`+c.record+`}`)
			}))
			defer store.Close()
			cl, err := client.New(store.URL)
			if err != nil {
				t.Fatal(err)
			}
			idem, err := middleware.New(middleware.Options{Store: cl, StoreTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t.Error("the handler ran on a replay")
			})))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k")
			req.Header.Set("Authorization", "Bearer x")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != c.status {
				t.Fatalf("got %d %q, %v; want %d", resp.StatusCode, b, err, c.status)
			}
			if c.body != "" && (string(b) != c.body || resp.Header.Get("X-Kept") != "yes") {
				t.Errorf("replayed %q with headers %v; want %q and X-Kept", b, resp.Header, c.body)
			}
		})
	}
}

package e2emiddleware_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// A store that answers a claim with a replay the middleware cannot send as
// it is. Bugs: a stored status outside 100-599 made the replay's
// WriteHeader panic, and the caller's connection dropped without an
// answer; a stored Content-Length (or another header of one connection,
// which the middleware never stores) was replayed as it was, and a body of
// another length broke the answer (unexpected EOF).
//
// And a replay of a record of another scope than the claim's (another
// tenant's, another key's: something between the middleware and the store
// mixed answers up) is no answer to send: 503, and the handler does not run.
// Bug: it was replayed to the caller.
func TestReplayFromABrokenStore(t *testing.T) {
	for _, c := range []struct {
		name, record string
		status       int
		body         string
		scope        string // the record's scope; "" the claim's own
	}{
		{"status 0", `"state":"completed","response":{"status":0,"body":""}}`, http.StatusServiceUnavailable, "", ""},
		{"status 1000", `"state":"completed","response":{"status":1000,"body":"aGk="}}`, http.StatusServiceUnavailable, "", ""},
		{"connection headers", `"state":"completed","response":{"status":200,"headers":{"Content-Length":"100","Connection":"close","Transfer-Encoding":"gzip","X-Kept":"yes"},"body":"aGk="}}`, http.StatusOK, "hi", ""},
		{"another principal's record", `"state":"completed","response":{"status":200,"body":"aGk="}}`, http.StatusServiceUnavailable, "",
			`"principal":"another-tenant","endpoint":"POST /pay","key":"k",`},
		{"another key's record", `"state":"completed","response":{"status":200,"body":"aGk="}}`, http.StatusServiceUnavailable, "",
			`"principal":"%s","endpoint":"POST /pay","key":"other-key",`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := postBehind(t, func(w http.ResponseWriter, r *http.Request) {
				var claim struct{ Principal, Endpoint, Key string }
				json.NewDecoder(r.Body).Decode(&claim)
				scope := fmt.Sprintf(`"principal":%q,"endpoint":%q,"key":%q,`, claim.Principal, claim.Endpoint, claim.Key)
				if c.scope != "" {
					scope = strings.Replace(c.scope, "%s", claim.Principal, 1)
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"outcome":"replay","record":{`+scope+c.record+`}`)
			}, false, "the handler ran on a replay")
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

// Something that answers, but not as a store does (a wrong address that
// reaches another service, a proxy's error page), is no outage: a claim may
// have been recorded. The handler does not run, even with FailOpen (it ran
// unprotected).
func TestAnswerThatIsNotAStoresFailsClosed(t *testing.T) {
	resp := postBehind(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>welcome</html>")
	}, true, "the handler ran unprotected on an answer that is not a store's")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %d, want 503", resp.StatusCode)
	}
}

// A path longer than the store's default --max-scope-bytes, on a handler
// wrapped without a route pattern: every request to it got 400 and never
// ran. Its endpoint now fits, and two long paths that share their first
// bytes stay two endpoints.
func TestLongPathRuns(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{})
	cl, err := client.New(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	idem, err := middleware.New(middleware.Options{Store: cl, Principal: middleware.AnonymousPrincipal,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	srv := newServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		io.WriteString(w, r.URL.Path[len(r.URL.Path)-1:])
	})))
	defer srv.Close()
	post := func(path string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Idempotency-Replayed")
	}
	prefix := "/accounts/" + strings.Repeat("a", 300) + "/refunds/"
	if code, body, _ := post(prefix + "1"); code != 200 || body != "1" {
		t.Fatalf("long path: %d %q", code, body)
	}
	if code, body, replayed := post(prefix + "1"); code != 200 || body != "1" || replayed != "true" {
		t.Fatalf("retry of the long path: %d %q replayed=%q", code, body, replayed)
	}
	if code, body, _ := post(prefix + "2"); code != 200 || body != "2" {
		t.Fatalf("another long path with the same key: %d %q (the same endpoint would answer 422)", code, body)
	}
	if runs != 2 {
		t.Fatalf("the handler ran %d times, want 2", runs)
	}
	req := httptest.NewRequest(http.MethodPost, prefix+"1", nil)
	if e := middleware.DefaultEndpoint(req); len(e) > middleware.MaxEndpointBytes || !strings.HasPrefix(e, "POST /accounts/aaa") {
		t.Fatalf("endpoint %q (%d bytes)", e, len(e))
	}
	if e := middleware.DefaultEndpoint(httptest.NewRequest(http.MethodPost, "/pay", nil)); e != "POST /pay" {
		t.Fatalf("a short endpoint changed: %q", e)
	}
}

// postBehind sends a keyed POST through the middleware in front of store (a
// server answering as store does), with FailOpen as given, to a handler
// that must not run (ran says why).
func postBehind(t *testing.T, store http.HandlerFunc, failOpen bool, ran string) *http.Response {
	t.Helper()
	st := newServer(t, store)
	t.Cleanup(st.Close)
	cl, err := client.New(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Every store here answers at once; a StoreTimeout of 200 ms was
	// outrun on a loaded machine (the full suite beside two others), and
	// the timeout, an outage, let the handler run with FailOpen.
	idem, err := middleware.New(middleware.Options{Store: cl, StoreTimeout: 5 * time.Second, FailOpen: failOpen,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error(ran) })))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return resp
}

// A redirect is no store's answer either (no idem route redirects): an
// http:// store address behind a front that sends it to https://, or a
// wrong address reaching a service that sends callers to its login page.
// The client follows none, and the middleware took the 3xx for an outage:
// with FailOpen, every request ran unprotected for as long as the
// configuration stayed wrong.
func TestStoreRedirectFailsClosed(t *testing.T) {
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		resp := postBehind(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.invalid"+r.URL.Path, status)
		}, true, fmt.Sprintf("%d: the handler ran unprotected on a redirect", status))
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%d: got %d, want 503", status, resp.StatusCode)
		}
	}
}

// A status past 599 is no HTTP status (net/http reads any three digits,
// and serves them too): it came back from the client as a *Problem of
// that status, with the body's code (unavailable), which the middleware
// took for an outage: asked again until StoreTimeout, then, with FailOpen,
// the handler ran unprotected. So did a 101 (no final answer), taken for a
// refusal. Each is an answer that is not a store's now.
func TestStoreStatusPast599FailsClosed(t *testing.T) {
	for _, status := range []int{http.StatusSwitchingProtocols, 600, 999} {
		resp := postBehind(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			io.WriteString(w, `{"status":503,"code":"unavailable","detail":"no leader"}`)
		}, true, fmt.Sprintf("%d: the handler ran unprotected", status))
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%d: answered %d, want 503", status, resp.StatusCode)
		}
	}
}

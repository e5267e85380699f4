package middleware

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// refusingStore is a memStore whose completes refuse answers as refuse
// says (nil: taken), with the problem the store answers. The store's own
// words for refusing arrays are pinned by api's tests.
type refusingStore struct {
	memStore
	refuse func(req client.CompleteRequest) *client.Problem
}

func (s *refusingStore) Complete(ctx context.Context, req client.CompleteRequest) (*client.CompleteResponse, error) {
	if p := s.refuse(req); p != nil {
		return nil, p
	}
	return s.memStore.Complete(ctx, req)
}

func unavailable(detail string) *client.Problem {
	return &client.Problem{Status: http.StatusServiceUnavailable, Code: client.CodeUnavailable, Detail: detail}
}

// An answer with a header sent twice (two Set-Cookie, two Link) is
// stored with the header as an array, which the store refuses with 503
// until every member runs a version that reads arrays: a rolling upgrade
// that stopped halfway, an old node added back, kept it refused for good
// while the store took everything else. The middleware asked again for
// ten minutes, every retry answered 409 in_progress, and then a retry ran
// the request a second time. After a while of such refusals the answer is
// stored with each such header folded into one value (Set-Cookie, which
// cannot be, left out), said once in the log, and the retry replays it.
func TestAnswerWithHeaderListsRefusedForGoodIsStoredFolded(t *testing.T) {
	defer func(d time.Duration) { foldListsAfter = d }(foldListsAfter)
	foldListsAfter = time.Second
	var arraysRefused atomic.Int32
	// A store one of whose members reads no arrays: its completes that
	// store one are refused, with the store's own answer.
	store := &refusingStore{refuse: func(req client.CompleteRequest) *client.Problem {
		if len(req.Response.HeaderLists) == 0 {
			return nil
		}
		arraysRefused.Add(1)
		return unavailable("a header stored as an array (sent more than once) needs every member to run a version that knows it; n3 not yet (a rolling upgrade, or a member down?): retry once they do")
	}}
	var logs syncBuffer
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, Lease: 3 * time.Second, StoreTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	var runs atomic.Int32
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Add("Link", "</receipts/1>; rel=receipt")
		w.Header().Add("Link", "</payments/1>; rel=self")
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})))
	t.Cleanup(srv.Close)
	send := func(key string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, key := range []string{"lists-1", "lists-2"} {
		first, body := send(key)
		require.Equal(t, http.StatusCreated, first.StatusCode, body)
		require.Equal(t, []string{"a=1", "b=2"}, first.Header.Values("Set-Cookie"), "the first caller gets the answer whole")
	}
	for _, key := range []string{"lists-1", "lists-2"} {
		var replay *http.Response
		var body string
		require.Eventually(t, func() bool {
			replay, body = send(key)
			return replay.StatusCode != http.StatusConflict
		}, 15*time.Second, 100*time.Millisecond, "the answer is never stored: every retry is answered 409")
		require.Equal(t, "true", replay.Header.Get(HeaderReplayed), "%d %s", replay.StatusCode, body)
		require.Equal(t, http.StatusCreated, replay.StatusCode)
		require.Equal(t, "charged", body)
		require.Equal(t, []string{"</receipts/1>; rel=receipt, </payments/1>; rel=self"}, replay.Header.Values("Link"))
		require.Equal(t, "/payments/1", replay.Header.Get("Location"))
		require.Empty(t, replay.Header.Values("Set-Cookie"))
	}
	require.EqualValues(t, 2, runs.Load(), "a request ran twice")
	require.Greater(t, arraysRefused.Load(), int32(2))
	require.NoError(t, WaitCompletes(t.Context()))
	require.Equal(t, 1, strings.Count(logs.String(), "folded into one value"), "said once:\n%s", logs.String())
	require.Contains(t, logs.String(), `left-out="[\"Set-Cookie\"]"`)
}

// Only the store's refusal of the arrays themselves folds an answer. A
// store that sheds load (its --max-inflight, 503 with Retry-After: 1) or
// has no leader answers 503 to any write alike: after a minute of such
// 503s, one shed try of the answer as it is was followed at once by the
// folded one, which the store took, and every replay lacked the answer's
// Set-Cookie and had its Link on one line, though the answer whole would
// have been stored at the next try.
func TestAnswerWithHeaderListsIsNotFoldedForAnotherRefusal(t *testing.T) {
	defer func(d time.Duration) { foldListsAfter = d }(foldListsAfter)
	foldListsAfter = time.Second
	// An overloaded store: it sheds every complete for 2 s, and the first
	// one after that, then takes them all.
	var shedding atomic.Bool
	shedding.Store(true)
	var shed, folded atomic.Int32
	time.AfterFunc(2*time.Second, func() { shedding.Store(false) })
	var once atomic.Bool
	store := &refusingStore{refuse: func(req client.CompleteRequest) *client.Problem {
		if len(req.Response.HeaderLists) == 0 {
			folded.Add(1)
		}
		if shedding.Load() || once.CompareAndSwap(false, true) {
			shed.Add(1)
			return unavailable("the node is handling 64 requests, the most it takes at once (--max-inflight); retry shortly")
		}
		return nil
	}}
	var logs syncBuffer
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, Lease: 3 * time.Second, StoreTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	srv := newTestServer(t, idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Add("Link", "</receipts/1>; rel=receipt")
		w.Header().Add("Link", "</payments/1>; rel=self")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})))
	t.Cleanup(srv.Close)
	send := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, "shed-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	first, body := send()
	require.Equal(t, http.StatusCreated, first.StatusCode, body)
	require.NoError(t, WaitCompletes(t.Context()))
	replay, body := send()
	require.Equal(t, "true", replay.Header.Get(HeaderReplayed), "%d %s", replay.StatusCode, body)
	require.Equal(t, []string{"a=1", "b=2"}, replay.Header.Values("Set-Cookie"), "the answer was stored folded for a refusal that was not of its arrays:\n%s", logs.String())
	require.Equal(t, []string{"</receipts/1>; rel=receipt", "</payments/1>; rel=self"}, replay.Header.Values("Link"))
	require.Zero(t, folded.Load())
	require.NotContains(t, logs.String(), "folded into one value")
}

// arraysRefusedStore refuses every answer with a header stored as an
// array as a store one of whose members reads none does (503), and
// counts the answer's header bytes as the store does, before that
// refusal: over max (when set), 413.
func arraysRefusedStore(max int) *refusingStore {
	return &refusingStore{refuse: func(req client.CompleteRequest) *client.Problem {
		if n := headerBytes(req.Response); max > 0 && n > max {
			return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge,
				Detail: fmt.Sprintf("response.headers are %d bytes together; at most %d are stored", n, max)}
		}
		if len(req.Response.HeaderLists) > 0 {
			return unavailable("a header stored as an array (sent more than once) needs every member to run a version that knows it; n3 (no answer) not yet (a rolling upgrade, or a member down?): retry once they do")
		}
		return nil
	}}
}

// foldedReplay serves h behind the middleware over store, folding after
// a second, sends one keyed request, and returns the replay of its
// answer once stored, with the middleware's log.
func foldedReplay(t *testing.T, store Store, h http.HandlerFunc) (*http.Response, string) {
	t.Helper()
	defer func(d time.Duration) { foldListsAfter = d }(foldListsAfter)
	foldListsAfter = time.Second
	var logs syncBuffer
	idem, err := New(Options{Store: store, Principal: AnonymousPrincipal, Lease: 3 * time.Second, StoreTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	srv := newTestServer(t, idem(h))
	t.Cleanup(srv.Close)
	send := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set(HeaderKey, "k")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusCreated, send().StatusCode)
	var replay *http.Response
	require.Eventually(t, func() bool {
		replay = send()
		return replay.StatusCode != http.StatusConflict
	}, 10*time.Second, 100*time.Millisecond, "the answer is never stored: every retry is answered 409")
	require.Equal(t, "true", replay.Header.Get(HeaderReplayed), "%d\n%s", replay.StatusCode, logs.String())
	require.NoError(t, WaitCompletes(t.Context()))
	return replay, logs.String()
}

// A header that takes one value (Location, ETag, Content-Disposition)
// sent twice, against RFC 9110, was folded like a list: the replay's
// Location was "/payments/1, /payments/2", a URL nobody sent. Folded,
// such a header keeps its first value (what a Go client's
// Response.Location read, as two Content-Types keep the first), a list
// (Link, or a header the RFC does not name) is joined, and the log names
// those kept first.
func TestFoldedAnswerKeepsTheFirstValueOfAHeaderThatIsNoList(t *testing.T) {
	replay, logs := foldedReplay(t, arraysRefusedStore(0), func(w http.ResponseWriter, r *http.Request) {
		for _, v := range []string{"1", "2"} {
			w.Header().Add("Location", "/payments/"+v)
			w.Header().Add("ETag", `"v`+v+`"`)
			w.Header().Add("Content-Disposition", `attachment; filename="`+v+`.pdf"`)
			w.Header().Add("Link", "</receipts/"+v+">; rel=receipt")
			w.Header().Add("X-Tags", "t"+v)
		}
		w.WriteHeader(http.StatusCreated)
	})
	require.Equal(t, []string{"/payments/1"}, replay.Header.Values("Location"))
	require.Equal(t, []string{`"v1"`}, replay.Header.Values("ETag"))
	require.Equal(t, []string{`attachment; filename="1.pdf"`}, replay.Header.Values("Content-Disposition"))
	require.Equal(t, []string{"</receipts/1>; rel=receipt, </receipts/2>; rel=receipt"}, replay.Header.Values("Link"))
	require.Equal(t, []string{"t1, t2"}, replay.Header.Values("X-Tags"))
	require.Contains(t, logs, `first-only="[\"Content-Disposition\" \"Etag\" \"Location\"]"`)
	require.Contains(t, logs, "left-out=[]")
}

// Joined, a header counts its name once but ", " for each value after the
// first, where the store counted the name for each value of an array: an
// answer of a header with a one-byte name sent 30 times, whose arrays
// fit the store's --max-response-header-bytes to the byte, went over it
// folded (413), and was never stored: its key was held until the lease
// ran out, and the retry ran the request again. The joined headers are
// left out, the largest first, until the answer fits as its arrays did,
// and the log names them.
func TestFoldedAnswerFitsTheStoresHeaderBytes(t *testing.T) {
	const max = 8192 // the store's default --max-response-header-bytes
	h := func(w http.ResponseWriter, r *http.Request) {
		for i := range 30 { // 30 × (1 + 262) = 7890 bytes
			w.Header().Add("X", fmt.Sprintf("%03d", i)+strings.Repeat("x", 259))
		}
		for _, v := range []string{"a", "b"} { // 2 × (4 + 147) = 302 bytes
			w.Header().Add("Link", "</"+v+strings.Repeat("r", 133)+">; rel=self")
		}
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
	}
	rec := httptest.NewRecorder()
	h(rec, nil)
	var arrays client.Response
	for k, vs := range rec.Header() {
		if k != "Location" {
			arrays.SetHeader(k, vs...)
		}
	}
	require.Equal(t, max, headerBytes(arrays), "the answer's arrays fit to the byte")
	replay, logs := foldedReplay(t, arraysRefusedStore(max+len("Location/payments/1")), h)
	require.Empty(t, replay.Header.Values("X"))
	require.Equal(t, []string{"</a" + strings.Repeat("r", 133) + ">; rel=self, </b" + strings.Repeat("r", 133) + ">; rel=self"}, replay.Header.Values("Link"))
	require.Equal(t, "/payments/1", replay.Header.Get("Location"))
	require.Contains(t, logs, `left-out="[\"X\"]"`)
}

// Joined headers alike in size are left out in the order of their names,
// as the comment says: the sort put them in reverse, "B" before "A", so
// the fold of one answer kept what the comment said it lost.
func TestFoldLeavesOutHeadersAlikeInSizeInTheirNamesOrder(t *testing.T) {
	var resp client.Response
	resp.SetHeader("B", "1", "2", "3") // arrays: 3 × (1+1) bytes; joined: 1+7, 2 more
	resp.SetHeader("A", "1", "2", "3")
	f := foldLists(resp) // 16 bytes for the arrays' 12: one of the two left out
	require.Equal(t, []string{"A"}, f.left)
	require.Equal(t, map[string]string{"B": "1, 2, 3"}, f.resp.Headers)
	resp.SetHeader("A", "1", "2", "3", "4") // larger: left out first
	f = foldLists(resp)
	require.Equal(t, []string{"A"}, f.left)
	resp.SetHeader("A", "1", "2")
	resp.SetHeader("B", "1", "2")
	resp.SetHeader("C", "1", "2", "3")
	resp.SetHeader("D", "1", "2", "3")
	f = foldLists(resp) // A and B fit as arrays; C and D are 4 bytes over
	require.Equal(t, []string{"C"}, f.left)
	require.Equal(t, map[string]string{"A": "1, 2", "B": "1, 2", "D": "1, 2, 3"}, f.resp.Headers)
}

// twoLimitsStore is a store of two members whose limits differ: the
// answer with arrays goes to one of arraysMax header bytes, which counts
// them and refuses its arrays (503: a member reads none), and the folded
// answer to one of foldMax header bytes and bodyMax body bytes (a client
// of several nodes moves on), which refuses it 413 if over, in the
// store's words when named is set, else in others (a proxy's, an older
// node's).
func twoLimitsStore(arraysMax, foldMax, bodyMax int, named bool) *refusingStore {
	arrays := arraysRefusedStore(arraysMax)
	return &refusingStore{refuse: func(req client.CompleteRequest) *client.Problem {
		if len(req.Response.HeaderLists) > 0 {
			return arrays.refuse(req)
		}
		detail := "the response is too large"
		if n := len(req.Response.Body); n > bodyMax {
			if named {
				detail = fmt.Sprintf("response.body is %d bytes decoded; at most %d are stored (store a reference instead)", n, bodyMax)
			}
			return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge, Detail: detail}
		}
		if n := headerBytes(req.Response); n > foldMax {
			if named {
				detail = fmt.Sprintf("response.headers are %d bytes together; at most %d are stored", n, foldMax)
			}
			return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeResponseTooLarge, Detail: detail}
		}
		return nil
	}}
}

// A folded answer was fitted to the bytes of its arrays, which the member
// that refused the arrays had taken. Sent to a member of a smaller
// --max-response-header-bytes (the members' flags differ: one restarted
// with a lower one), it was refused 413 and the complete gave up: the key
// was held until the lease ran out, and the retry ran the request again.
// It is folded again within the limit the 413 names, or, if it names
// none, one joined header fewer each time, and sent at once; a body over
// the member's --max-response-bytes is dropped, as complete drops it; an
// answer whose headers fit no fold is stored with its status alone.
func TestFoldedAnswerFitsAMemberOfASmallerLimit(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		for _, v := range []string{"a", "b"} {
			w.Header().Add("X-Big", v+strings.Repeat("x", 299)) // 2 × (5+300) as arrays, 607 joined
			w.Header().Add("X-Mid", v+strings.Repeat("m", 99))  // 2 × (5+100), 207 joined
			w.Header().Add("Link", "</receipts/"+v+">; rel=receipt")
		}
		w.Header().Set("X-Trace", strings.Repeat("t", 120))
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}
	for _, c := range []struct {
		name             string
		foldMax, bodyMax int
		named            bool
		bodyOmitted      bool
	}{
		{"the limit named", 450, 100, true, false},
		{"no limit named", 450, 100, false, false},
		{"the body over", 450, 3, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			replay, logs := foldedReplay(t, twoLimitsStore(8192, c.foldMax, c.bodyMax, c.named), h)
			require.Empty(t, replay.Header.Values("X-Big"))
			require.Equal(t, []string{"a" + strings.Repeat("m", 99) + ", b" + strings.Repeat("m", 99)}, replay.Header.Values("X-Mid"))
			require.Equal(t, []string{"</receipts/a>; rel=receipt, </receipts/b>; rel=receipt"}, replay.Header.Values("Link"))
			require.Equal(t, "/payments/1", replay.Header.Get("Location"))
			require.Len(t, replay.Header.Get("X-Trace"), 120)
			require.Contains(t, logs, `left-out="[\"X-Big\"]"`)
			if c.bodyOmitted {
				require.Equal(t, OmittedTooLarge, replay.Header.Get(HeaderBodyOmitted))
				require.Contains(t, logs, "without its body, or with its status alone")
			} else {
				require.Empty(t, replay.Header.Get(HeaderBodyOmitted))
			}
		})
	}
	t.Run("no fold fits", func(t *testing.T) {
		replay, logs := foldedReplay(t, twoLimitsStore(8192, 100, 100, true), h)
		require.Equal(t, http.StatusCreated, replay.StatusCode)
		require.Equal(t, OmittedTooLarge, replay.Header.Get(HeaderBodyOmitted))
		for _, name := range []string{"Location", "X-Trace", "Link", "X-Mid"} {
			require.Empty(t, replay.Header.Values(name))
		}
		require.Contains(t, logs, "without its body, or with its status alone")
	})
}

// A folded answer sent to a member of a smaller --max-request-bytes (the
// members' flags differ) is refused 413 "request body is larger than N
// bytes", which names no header: every joined header was taken out, one
// per try, and then the status alone was stored, the replay's Location
// lost for a body that member would not take. The body is dropped first,
// as complete drops it, and the headers kept.
func TestFoldedAnswerOverAMembersRequestLimitDropsItsBody(t *testing.T) {
	arrays := arraysRefusedStore(8192)
	var completes atomic.Int32
	store := &refusingStore{refuse: func(req client.CompleteRequest) *client.Problem {
		if len(req.Response.HeaderLists) > 0 {
			return arrays.refuse(req)
		}
		completes.Add(1)
		if len(req.Response.Body) > 3 {
			return &client.Problem{Status: http.StatusRequestEntityTooLarge, Code: client.CodeRequestTooLarge, Detail: "request body is larger than 1024 bytes"}
		}
		return nil
	}}
	replay, logs := foldedReplay(t, store, func(w http.ResponseWriter, r *http.Request) {
		for _, v := range []string{"a", "b"} {
			w.Header().Add("Link", "</receipts/"+v+">; rel=receipt")
			w.Header().Add("X-Mid", v+strings.Repeat("m", 99))
		}
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	require.Equal(t, http.StatusCreated, replay.StatusCode)
	require.Equal(t, "/payments/1", replay.Header.Get("Location"), logs)
	require.Equal(t, []string{"</receipts/a>; rel=receipt, </receipts/b>; rel=receipt"}, replay.Header.Values("Link"))
	require.Equal(t, OmittedTooLarge, replay.Header.Get(HeaderBodyOmitted))
	require.Contains(t, logs, "without its body, or with its status alone")
	require.EqualValues(t, 2, completes.Load(), "the fold, then the fold without its body")
}

package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Upstream is the fixture service behind the front under test. Every path
// is one handler, and it counts how often each path ran, which is what the
// suite checks: a replay must not run it again. The query drives what it
// answers:
//
//	status=N     answer status N (default 201)
//	bytes=N      a body of N bytes instead of the JSON document
//	sleep=D      work for D (Go duration) before answering, ignoring the
//	             request's context, like a payment that commits anyway
//	flush=1      flush the headers and the first half of the body, then
//	             the rest (a stream)
//
// The JSON document names the path, the run number of the path and the
// request body, and two Set-Cookie headers and a Location go with it, so a
// replay can be compared with the original byte for byte.
type Upstream struct {
	mu       sync.Mutex
	runs     map[string]int
	finished map[string]int
}

// NewUpstream returns a fixture with every count at zero.
func NewUpstream() *Upstream {
	return &Upstream{runs: map[string]int{}, finished: map[string]int{}}
}

// Runs returns how often the handler of path started.
func (u *Upstream) Runs(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[path]
}

// Finished returns how often the handler of path returned.
func (u *Upstream) Finished(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.finished[path]
}

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	u.mu.Lock()
	u.runs[path]++
	run := u.runs[path]
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.finished[path]++
		u.mu.Unlock()
	}()
	body, _ := io.ReadAll(r.Body)
	q := r.URL.Query()
	if d, err := time.ParseDuration(q.Get("sleep")); err == nil {
		time.Sleep(d)
	}
	status := http.StatusCreated
	if s, err := strconv.Atoi(q.Get("status")); err == nil {
		status = s
	}
	h := w.Header()
	h.Set("Location", path+"/"+strconv.Itoa(run))
	h.Add("Set-Cookie", "session=s"+strconv.Itoa(run)+"; Path=/")
	h.Add("Set-Cookie", "theme=dark; Path=/")
	h.Set("X-Upstream-Run", strconv.Itoa(run))
	var out []byte
	if n, err := strconv.Atoi(q.Get("bytes")); err == nil {
		h.Set("Content-Type", "application/octet-stream")
		out = []byte(strings.Repeat("x", n))
	} else {
		h.Set("Content-Type", "application/json")
		out, _ = json.Marshal(map[string]any{"path": path, "run": run, "method": r.Method, "body": string(body)})
	}
	if q.Get("flush") == "1" {
		// A stream: flushed as it is written, and of a streaming type, which
		// is how a proxy (that sees no flush) tells it from a long answer.
		h.Set("Content-Type", "text/event-stream")
		w.WriteHeader(status)
		_, _ = w.Write(out[:len(out)/2])
		_ = http.NewResponseController(w).Flush()
		_, _ = w.Write(out[len(out)/2:])
		return
	}
	h.Set("Content-Length", fmt.Sprint(len(out)))
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

package middleware

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/wire"
)

// recorder passes the handler's answer through to the client as it is
// written and keeps a copy of what a replay needs: the status, the headers
// as they were when the status was written, and the body up to a limit.
type recorder struct {
	w        http.ResponseWriter
	limit    int
	code     int         // the final status; 0 until written
	header   http.Header // the headers sent with code
	body     bytes.Buffer
	overflow bool // the body passed limit: stored without it
	flushed  bool // streamed: never replayed as if complete
	hijacked bool
	// dropped names the headers (or the Content-Type) that response left
	// out as the store would refuse them.
	dropped []string
}

func newRecorder(w http.ResponseWriter, limit int) *recorder { return &recorder{w: w, limit: limit} }

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	// An informational answer (103 Early Hints) goes out and the final one
	// follows; a second final status is net/http's to complain about.
	if r.code != 0 || (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) {
		r.w.WriteHeader(code)
		return
	}
	r.code = code
	r.header = r.w.Header().Clone()
	r.w.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow {
		if r.body.Len()+len(p) > r.limit {
			r.overflow = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(p)
		}
	}
	return r.w.Write(p)
}

// FlushError makes the answer a stream (http.ResponseController finds it).
func (r *recorder) FlushError() error {
	if r.code == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.flushed = true
	return http.NewResponseController(r.w).Flush()
}

// Flush implements http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// Hijack implements http.Hijacker: the connection is the handler's from now.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.w).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the server's writer (deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// storableValue is a header value the store keeps: without control
// characters (a tab aside), in UTF-8; a name must be an HTTP token
// (wire.ValidHeaderName). The handler's client got the others; the store
// refused the whole answer for one of them, and the retry ran the handler
// again. They are left out of the stored answer instead (and logged).
func storableValue(v string) bool { return wire.ValidHeaderValue(v) && utf8.ValidString(v) }

// notStored are headers of one connection or one transmission, which a
// replay makes anew.
var notStored = []string{"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection",
	"Upgrade", "Trailer", "Date", "Content-Type", HeaderReplayed, HeaderBodyOmitted}

// response is what to store: status, headers and body, or the status and
// headers with a note of why the body is missing.
func (r *recorder) response() client.Response {
	h := r.header
	if h == nil { // nothing written: an empty 200
		h = r.w.Header().Clone()
	}
	resp := client.Response{Status: r.status(), ContentType: h.Get("Content-Type")}
	body := r.body.Bytes()
	if resp.ContentType == "" && len(body) > 0 && !r.overflow && !r.flushed {
		if _, suppressed := h["Content-Type"]; !suppressed {
			resp.ContentType = http.DetectContentType(body) // what net/http sent
		}
	}
	if !storableValue(resp.ContentType) {
		r.dropped = append(r.dropped, "Content-Type")
		resp.ContentType = ""
	}
	for _, k := range notStored {
		delete(h, k)
	}
	for k, vs := range h {
		if !wire.ValidHeaderName(k) {
			r.dropped = append(r.dropped, k)
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return !storableValue(v) })
		if len(kept) < len(vs) {
			r.dropped = append(r.dropped, k)
		}
		if len(kept) > 0 {
			resp.SetHeader(k, kept...)
		}
	}
	switch {
	case r.flushed:
		resp.SetHeader(HeaderBodyOmitted, OmittedStreamed)
	case r.overflow:
		resp.SetHeader(HeaderBodyOmitted, OmittedTooLarge)
	default:
		resp.Body = bytes.Clone(body)
	}
	return resp
}

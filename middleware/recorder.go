package middleware

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/wire"
)

// recorder keeps a copy of what a replay needs: the status, the headers
// as they were when the status was written, and the body up to a limit.
//
// It holds the answer back until the handler has returned and the store
// has taken it, or answerWait has passed (storeThenAnswer), then sends it
// whole, with its length (finish). Passed through as written, an answer
// without a Content-Length (most handlers set none) ended only when the
// middleware returned, after the complete: the caller of a request whose
// store went away after the claim waited StoreTimeout for the end of an
// answer it already had. An answer goes through as written from the
// moment the handler flushes it (a stream), hijacks the connection, or
// writes more than the limit.
type recorder struct {
	w        http.ResponseWriter
	method   string
	limit    int
	code     int         // the final status; 0 until written
	header   http.Header // the headers sent with code
	body     bytes.Buffer
	written  int64 // the body's bytes the handler wrote, kept or not
	overflow bool  // the body passed limit: stored without it
	flushed  bool  // streamed: never replayed as if complete
	hijacked bool
	passing  bool        // the answer goes through as written (released)
	outer    http.Header // the headers set before the handler ran (outer middleware: CORS)
	// dropped names the headers (or the Content-Type) that response left
	// out as the store would refuse them.
	dropped []string
	// sniff is the start of the body passed on before the first flush:
	// what net/http sniffed a Content-Type from when the handler set none.
	// A stream or an answer over the limit is stored without its body,
	// and its replay had no Content-Type though its caller got one.
	sniff     []byte
	sniffDone bool // flushed: net/http has sent its headers
}

func newRecorder(w http.ResponseWriter, r *http.Request, limit int) *recorder {
	return &recorder{w: w, method: r.Method, limit: limit, outer: w.Header().Clone()}
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	// An informational answer (103 Early Hints) goes out and the final one
	// follows; a second final status is net/http's to complain about, and
	// of a held answer the first stands, as net/http would have it.
	if r.code == 0 && code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		r.w.WriteHeader(code)
		return
	}
	if r.code != 0 {
		if r.passing {
			r.w.WriteHeader(code)
		}
		return
	}
	r.code = code
	r.header = r.w.Header().Clone()
	if r.passing || code == http.StatusSwitchingProtocols {
		r.passing = true
		r.w.WriteHeader(code)
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.written += int64(len(p))
	if !r.overflow {
		if r.body.Len()+len(p) > r.limit {
			r.release()
			r.overflow = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(p)
			if !r.passing {
				return len(p), nil
			}
		}
	}
	return r.pass(p)
}

// pass writes p through, keeping the start of what net/http sniffs.
func (r *recorder) pass(p []byte) (int, error) {
	if !r.sniffDone && len(r.sniff) < sniffLen {
		r.sniff = append(r.sniff, p[:min(len(p), sniffLen-len(r.sniff))]...)
	}
	return r.w.Write(p)
}

// sniffLen is as much of a body as http.DetectContentType reads.
const sniffLen = 512

// release sends what is held (the status and the body so far) and lets
// the rest of the answer through as it is written.
func (r *recorder) release() {
	if r.passing {
		return
	}
	r.passing = true
	if r.code == 0 {
		return
	}
	trailers := r.restoreHeader()
	r.w.WriteHeader(r.code)
	if r.body.Len() > 0 {
		_, _ = r.pass(r.body.Bytes())
	}
	r.putTrailers(trailers)
}

// restoreHeader puts back the headers as they were when the status was
// written: net/http ignores later changes, and so does a held answer.
// The trailers (declared in Trailer, or http.TrailerPrefix) the handler
// set after the status are net/http's to send after the body: they are
// taken out of the header map here, so that they do not go out among the
// headers (a held answer's status is written after the handler has set
// them), and put back with putTrailers once the headers are sent.
func (r *recorder) restoreHeader() http.Header {
	h := r.w.Header()
	declared := map[string]bool{}
	for _, v := range r.header.Values("Trailer") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				declared[http.CanonicalHeaderKey(t)] = true
			}
		}
	}
	var trailers http.Header
	for k, vs := range h {
		if declared[k] || strings.HasPrefix(k, http.TrailerPrefix) {
			if trailers == nil {
				trailers = http.Header{}
			}
			trailers[k] = vs
		}
		delete(h, k)
	}
	// A declared trailer set before the status goes out among the
	// headers too, as net/http sends it.
	for k, vs := range r.header {
		h[k] = vs
	}
	return trailers
}

// putTrailers puts back the trailers restoreHeader took out, once the
// headers are sent, for net/http to send after the body.
func (r *recorder) putTrailers(trailers http.Header) {
	h := r.w.Header()
	for k, vs := range trailers {
		h[k] = vs
	}
}

// finish sends a held answer whole, with its Content-Length, and flushes
// it, once the handler has returned.
func (r *recorder) finish() {
	if r.passing || r.hijacked {
		return
	}
	r.passing = true
	code := r.status()
	var trailers http.Header
	if r.code != 0 {
		trailers = r.restoreHeader()
	}
	h := r.w.Header()
	if bodyAllowed(code) && r.method != http.MethodHead && h.Get("Content-Length") == "" &&
		h.Get("Transfer-Encoding") == "" && h.Get("Trailer") == "" && len(trailers) == 0 &&
		!outerEncoded(r.outer, h) {
		h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	}
	r.w.WriteHeader(code)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
	_ = http.NewResponseController(r.w).Flush()
	r.putTrailers(trailers)
}

// outerEncoded reports an answer whose Content-Encoding an outer
// middleware set before the handler ran (the common gzip middleware sets
// it, then wraps the writer in a gzip.Writer): what is written here is
// encoded on its way out, so its length is not the length sent. Given the
// length written, the caller got a Content-Length longer than the gzip
// stream that followed, and a broken transfer.
func outerEncoded(outer, h http.Header) bool {
	ce := h.Values("Content-Encoding")
	return len(ce) > 0 && slices.Equal(ce, outer.Values("Content-Encoding"))
}

// withhold drops a held answer that was not sent, so that another can go
// in its place (with the headers set before the handler ran, such as an
// outer middleware's CORS headers); false when it has gone out already (a stream, a hijacked
// connection, a body over the limit).
func (r *recorder) withhold() bool {
	if r.passing || r.hijacked {
		return false
	}
	r.passing = true
	h := r.w.Header()
	for k := range h {
		delete(h, k)
	}
	for k, vs := range r.outer {
		h[k] = vs
	}
	return true
}

// bodyAllowed reports whether an answer of this status may have a body
// (RFC 9110: none for 1xx, 204 and 304).
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// FlushError makes the answer a stream (http.ResponseController finds it).
func (r *recorder) FlushError() error {
	if r.code == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.flushed = true
	r.release()
	r.sniffDone = true // net/http sends its headers now, sniffed from what it has
	return http.NewResponseController(r.w).Flush()
}

// Flush implements http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// Hijack implements http.Hijacker: the connection is the handler's from now.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.release()
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
// replay makes anew: the hop-by-hop ones (RFC 9110 7.6.1; those the
// answer's Connection names too, response drops them), the proxy's
// challenge, and those of the body and the middleware.
var notStored = append(slices.Clone(connectionHeaders), "Date", "Content-Type", HeaderReplayed, HeaderBodyOmitted)

// broken reports an answer whose declared Content-Length is not the
// length of the body the handler wrote: its caller got a broken transfer
// (net/http cuts it off), and stored, it was replayed as complete with the
// bytes that were written.
func (r *recorder) broken() bool {
	h := r.header
	if h == nil {
		h = r.w.Header()
	}
	cl := h.Get("Content-Length")
	if cl == "" || r.hijacked || r.method == http.MethodHead || !bodyAllowed(r.status()) {
		return false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
	return err == nil && n != r.written
}

// response is what to store: status, headers and body, or the status and
// headers with a note of why the body is missing.
func (r *recorder) response() client.Response {
	h := r.header.Clone() // the held answer still goes out with r.header
	if h == nil {         // nothing written: an empty 200
		h = r.w.Header().Clone()
	}
	resp := client.Response{Status: r.status(), ContentType: h.Get("Content-Type")}
	body := r.body.Bytes()
	if _, suppressed := h["Content-Type"]; resp.ContentType == "" && !suppressed {
		sent := body
		if r.overflow || r.flushed { // passed on as written, and not kept
			sent = r.sniff
		}
		if len(sent) > 0 {
			resp.ContentType = http.DetectContentType(sent) // what net/http sent
		}
	}
	if !storableValue(resp.ContentType) {
		r.dropped = append(r.dropped, "Content-Type")
		resp.ContentType = ""
	}
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				delete(h, http.CanonicalHeaderKey(name)) // this hop's only
			}
		}
	}
	for _, k := range notStored {
		delete(h, k)
	}
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			delete(h, k) // a trailer set before the status: not a header
		}
	}
	// Headers an outer middleware set for this request before the handler
	// ran (a request id, CORS's Access-Control-Allow-Origin for the
	// caller's Origin) are not the handler's answer: stored, they were
	// replayed over the ones set for the retry, which then carried the
	// first request's id, and a browser retrying from another origin was
	// refused its answer. Those the handler changed are its own.
	for k, vs := range r.outer {
		if slices.Equal(h[k], vs) {
			delete(h, k)
		}
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

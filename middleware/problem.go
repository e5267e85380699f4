package middleware

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// problem is an RFC 9457 problem document, shaped like the store's own.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

var titles = map[string]string{
	"idempotency_key_missing": "Idempotency-Key header missing",
	"idempotency_key_invalid": "Idempotency-Key header not valid",
	"unauthorized":            "Unauthorized",
	"reauthorization_failed":  "Stored answer not available to this caller",
	"request_too_large":       "Request body too large",
	"in_progress":             "Request in progress",
	"lease_lost":              "Attempt superseded",
	"fingerprint_mismatch":    "Idempotency-Key reused with another request",
	"quota_exceeded":          "Too many idempotency keys",
	"principal_limit":         "Too many principals",
	"invalid_request":         "Invalid request",
	"unavailable":             "Idempotency store unavailable",
	"stored_answer_not_final": "Stored answer cannot be replayed",
}

// ProblemType is the type URI of the problem with code: where it is
// documented.
func ProblemType(code string) string { return "https://idem.dev/problems/" + code }

func writeProblem(w http.ResponseWriter, status int, code, detail string, retryAfter int) {
	title := titles[code]
	if title == "" {
		title = http.StatusText(status)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Del("Content-Length")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: ProblemType(code), Title: title, Status: status, Detail: detail, Code: code})
}

// CallerError is an error whose text is written for the caller to read.
// An Options.Principal, Fingerprint or Reauthorize that returns one, or an
// error that wraps one, has its Detail in the problem document's detail
// (unauthorized, invalid_request, reauthorization_failed). The text of
// any other error they return is the application's own and may say what
// no caller should read (a database error naming an internal address): it
// is logged at warning, with the request's method and path (at most a
// line every 10 s for each option, with the count of failures), and the
// caller reads only what failed ("the request's principal could not be
// determined"). The principals and fingerprints of this package return
// CallerErrors.
type CallerError struct {
	Detail string
}

func (e *CallerError) Error() string { return e.Detail }

func callerErrorf(format string, args ...any) error {
	return &CallerError{Detail: fmt.Sprintf(format, args...)}
}

// callerDetail is the detail of a problem answered for err, returned by
// the option whose failures l counts: a CallerError's own, else fallback,
// with err logged.
func (m *mw) callerDetail(r *http.Request, l *optionLog, err error, fallback string) string {
	var ce *CallerError
	switch {
	case err == nil:
		return fallback
	case errors.As(err, &ce) && ce.Detail != "":
		return ce.Detail
	}
	// Spaced, per option: a Principal that fails every request without a
	// credential (an attacker's flood, a misconfigured gateway) wrote a
	// line for each, and the log filled the disk.
	if n := l.failed.Add(1); l.spacer.Allow(10 * time.Second) {
		m.log.Warn("idempotency: "+l.option+" failed; the caller is told only that it did (return a middleware.CallerError for a detail the caller may read; said at most every 10s)",
			"method", r.Method, "path", r.URL.Path, "error", err, "failed-total", n)
	}
	return fallback
}

// optionLog counts the failures of one option and spaces their lines.
type optionLog struct {
	option string // "Options.Principal"
	failed atomic.Int64
	spacer mono.Spacer
}

// callerDetailSuffix is callerDetail as ": detail" after a problem's own
// words, or nothing.
func (m *mw) callerDetailSuffix(r *http.Request, l *optionLog, err error) string {
	if d := m.callerDetail(r, l, err, ""); d != "" {
		return ": " + d
	}
	return ""
}

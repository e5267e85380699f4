package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrAddress is returned by New for an address it cannot use.
	ErrAddress = errors.New("client: bad address")
	// ErrToken is returned by New for a bearer token (WithToken) that
	// could never be sent: longer than MaxTokenBytes, or holding a
	// control character.
	ErrToken = errors.New("client: unusable bearer token")
	// ErrBadAnswer is returned when a 2xx answer is not the JSON the route
	// promises (or is too large to read).
	ErrBadAnswer = errors.New("client: malformed answer")
)

// MaxTokenBytes is the longest bearer token New takes. An idem node
// (net/http's default) reads at most 1 MiB of a request's line and
// headers together; a token near that leaves no room for the rest (a
// lookup's URL, the headers a follower adds when it forwards), and one
// beyond it is answered 431 or with a dropped connection, which a caller
// could only read as an unknown outcome. 64 KiB is far above any real
// token (idem token new makes 37 bytes; JWTs are a few KiB).
const MaxTokenBytes = 64 << 10

// The machine-readable codes of docs/API.md's problem documents.
const (
	CodeInvalidRequest      = "invalid_request"
	CodeRequestTooLarge     = "request_too_large"
	CodeResponseTooLarge    = "response_too_large"
	CodeInProgress          = "in_progress"
	CodeFingerprintMismatch = "fingerprint_mismatch"
	CodeQuotaExceeded       = "quota_exceeded"
	CodeUnavailable         = "unavailable"
	CodeTokenMismatch       = "token_mismatch"
	CodeAlreadyCompleted    = "already_completed"
	CodeNotFound            = "not_found"
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodePrincipalLimit      = "principal_limit"
	CodeStorageFull         = "storage_full"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeInternal            = "internal"
	CodeWouldLoseQuorum     = "would_lose_quorum"
	CodeScopeMismatch       = "scope_mismatch"
	CodeRetentionMismatch   = "retention_mismatch"
	CodeAddressInUse        = "address_in_use"
	CodeIDInUse             = "id_in_use"
	CodeNotAnswering        = "not_answering"
	CodeForeignCluster      = "foreign_cluster"
	CodeNodeTokenRefused    = "node_token_refused"
	CodeNoTransferTarget    = "no_transfer_target"
)

// Sentinels for errors.Is: a *Problem matches the sentinel with its code.
// They only carry a code; read the details from the *Problem by errors.As.
var (
	ErrInvalidRequest      = &Problem{Code: CodeInvalidRequest}
	ErrRequestTooLarge     = &Problem{Code: CodeRequestTooLarge}
	ErrResponseTooLarge    = &Problem{Code: CodeResponseTooLarge}
	ErrInProgress          = &Problem{Code: CodeInProgress}
	ErrFingerprintMismatch = &Problem{Code: CodeFingerprintMismatch}
	ErrQuotaExceeded       = &Problem{Code: CodeQuotaExceeded}
	ErrUnavailable         = &Problem{Code: CodeUnavailable}
	ErrTokenMismatch       = &Problem{Code: CodeTokenMismatch}
	ErrAlreadyCompleted    = &Problem{Code: CodeAlreadyCompleted}
	ErrNotFound            = &Problem{Code: CodeNotFound}
	ErrUnauthorized        = &Problem{Code: CodeUnauthorized}
	ErrForbidden           = &Problem{Code: CodeForbidden}
	ErrPrincipalLimit      = &Problem{Code: CodePrincipalLimit}
	ErrStorageFull         = &Problem{Code: CodeStorageFull}
	ErrWouldLoseQuorum     = &Problem{Code: CodeWouldLoseQuorum}
	ErrNoTransferTarget    = &Problem{Code: CodeNoTransferTarget}
)

// Problem is a non-2xx answer: the server's RFC 9457 problem document, or,
// when the body was not one (a proxy's error page, a plain-text 503 from
// /readyz), a document made from the HTTP status with the body as Detail.
// Detail is cut at 16 KiB, Type, Title and Code at 1 KiB (a node's are far
// shorter); Raw holds the answer whole.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"` // always the HTTP status of the answer
	Detail string `json:"detail"`
	Code   string `json:"code"` // empty when the answer was not a problem document

	// LeaseExpiresAt is when the lease of the attempt that holds the key
	// runs out (code in_progress); zero otherwise.
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`

	// RetryAfter is the Retry-After header (in_progress, quota_exceeded,
	// unavailable); zero when the header was absent.
	RetryAfter time.Duration `json:"-"`

	// Raw is the body of the answer as received.
	Raw json.RawMessage `json:"-"`
}

// Error implements error.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString("client:")
	if p.Status != 0 {
		b.WriteString(" " + strconv.Itoa(p.Status))
	}
	if p.Code != "" {
		b.WriteString(" " + p.Code)
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if msg != "" {
		b.WriteString(": " + msg)
	}
	return b.String()
}

// Is reports whether target is a *Problem with the same code, so that
// errors.Is(err, client.ErrNotFound) works. A node's 404 for a path it
// serves no route at (the Client's address has a wrong base path, or names
// another listener of the node) is not ErrNotFound: a service asking Get
// "was this paid?" took such an answer for "no record".
func (p *Problem) Is(target error) bool {
	t, ok := target.(*Problem)
	if ok && t.Code == CodeNotFound && p.NoRoute() {
		return false
	}
	return ok && t.Code != "" && t.Code == p.Code
}

// NoRoute reports whether p is a node's answer to a path it serves no
// route at: the request never reached a record, and the Client's address
// is likely wrong.
func (p *Problem) NoRoute() bool {
	return p.Status == http.StatusNotFound && p.Code == CodeNotFound &&
		(strings.HasPrefix(p.Detail, "no route ") || strings.HasPrefix(p.Detail, "this listener (--health-addr)"))
}

// maxDetailBytes bounds the Detail made from a body that is not a problem
// document.
const maxDetailBytes = 512

// newProblem decodes the non-2xx answer resp whose body is raw.
func newProblem(resp *http.Response, raw []byte, now time.Time) *Problem {
	p := &Problem{}
	if err := json.Unmarshal(raw, p); err != nil || (p.Code == "" && p.Title == "" && p.Detail == "") {
		p = &Problem{Detail: textDetail(raw)}
	}
	// A node's texts are a few hundred bytes. One of megabytes (a broken
	// or hostile answer; up to maxAnswerBytes are read) went whole into
	// every log line and every answer made from it: the middleware logs
	// it, and passes a 400's detail on to its caller. Raw keeps it all.
	p.Type, p.Title, p.Code = cut(p.Type, maxProblemFieldBytes), cut(p.Title, maxProblemFieldBytes), cut(p.Code, maxProblemFieldBytes)
	p.Detail = cut(p.Detail, maxProblemDetailBytes)
	p.Status = resp.StatusCode
	if loc := resp.Header.Get("Location"); loc != "" && p.Detail == "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		p.Detail = textDetail([]byte("redirect to " + loc + " not followed"))
	}
	if p.Title == "" {
		p.Title = http.StatusText(resp.StatusCode)
	}
	p.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	p.Raw = raw
	return p
}

// maxProblemDetailBytes and maxProblemFieldBytes bound the texts of a
// problem document (cut).
const (
	maxProblemDetailBytes = 16 << 10
	maxProblemFieldBytes  = 1 << 10
)

// cut is s cut to at most n bytes and a mark, on a rune's start.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func textDetail(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > maxDetailBytes {
		s = s[:maxDetailBytes] + "…"
	}
	return strings.ToValidUTF8(s, string(utf8.RuneError))
}

// maxRetryAfterSeconds is the most whole seconds a time.Duration holds.
const maxRetryAfterSeconds = int64(math.MaxInt64 / time.Second)

// parseRetryAfter reads both forms of RFC 9110's Retry-After: delay seconds
// (what idem sends) and an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// More seconds than a Duration holds (a broken or hostile proxy;
		// a node sends a few) is the longest one, not an overflow: that
		// came out negative, and a caller waiting it out retried at once.
		if n > maxRetryAfterSeconds {
			n = maxRetryAfterSeconds
		}
		if n <= 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func badAnswer(method, path string, err error) error {
	return fmt.Errorf("%w of %s %s: %w", ErrBadAnswer, method, path, err)
}

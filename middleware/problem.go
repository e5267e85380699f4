package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
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

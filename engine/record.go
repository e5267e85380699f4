package engine

import (
	"bytes"
	"maps"
	"slices"
)

// State is the lifecycle state of a record.
type State uint8

// The states of a record. A record is created in_progress by a claim and
// ends completed (response stored) or failed (released: the next claim runs
// again).
const (
	StateInProgress State = 1
	StateCompleted  State = 2
	StateFailed     State = 3
)

func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	case StateFailed:
		return "failed"
	}
	return "unknown"
}

// Scope identifies a record: principal, endpoint and key. With
// principal-scoped uniqueness the endpoint is stored but not part of the key.
type Scope struct {
	Principal string
	Endpoint  string
	Key       string
}

// Response is the stored answer of a completed attempt, replayed verbatim.
// A header is stored in the form it was given: one string in Headers, or an
// array (a header sent more than once, e.g. Set-Cookie) in HeaderLists; a
// name is in one of the two.
type Response struct {
	Status      int
	ContentType string
	Headers     map[string]string
	HeaderLists map[string][]string
	Body        []byte
}

// Equal reports whether two responses are identical.
func (r *Response) Equal(o *Response) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.Status == o.Status && r.ContentType == o.ContentType &&
		maps.Equal(r.Headers, o.Headers) && bytes.Equal(r.Body, o.Body) &&
		maps.EqualFunc(r.HeaderLists, o.HeaderLists, slices.Equal[[]string])
}

// Record is one idempotency record. Times are Unix milliseconds of cluster
// time; zero means unset.
type Record struct {
	Scope
	State         State
	Fingerprint   string
	Attempt       uint32
	Token         uint64
	ClaimID       string
	CorrelationID string
	CreatedMs     int64
	ExpiresMs     int64
	LeaseMs       int64 // only while in_progress
	CompletedMs   int64
	Response      *Response // only when completed
}

package bench

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Scope names one record: the full (principal, endpoint, key) triple.
type Scope struct {
	Principal, Endpoint, Key string
}

// Outcome of a claim, as the load generator judges it.
type Outcome uint8

const (
	// Indeterminate: the store may or may not have decided the claim (a
	// transport error, a timeout, "no leader"). Says nothing about
	// correctness.
	Indeterminate Outcome = iota
	// Won: the caller now owns the attempt (idem's 201 claimed).
	Won
	// Lost: another attempt holds the key (idem's 409 in_progress).
	Lost
	// Replay: the key is completed and its stored response comes back
	// (idem's 200 replay).
	Replay
)

func (o Outcome) String() string {
	switch o {
	case Won:
		return "won"
	case Lost:
		return "lost"
	case Replay:
		return "replay"
	default:
		return "indeterminate"
	}
}

// ClaimResult is a claim's answer. Token is the fencing token of a won
// claim, to be handed back to Complete.
type ClaimResult struct {
	Outcome Outcome
	Token   string
	// Lease is how long a won claim holds its key before another claim
	// may take the attempt over (idem's lease); 0 when nothing takes it
	// over before it expires.
	Lease time.Duration
}

// Driver speaks to one store. The load generator calls it from every
// client goroutine at once, so it must be safe for concurrent use. A
// failure is returned as an *Error (or any error, counted as "error" and
// treated as a wrong answer).
type Driver interface {
	// Claim tries to take scope for a new attempt, identified by claimID
	// (a repeat with the same claimID may get the same claim back).
	Claim(ctx context.Context, s Scope, claimID string) (ClaimResult, error)
	// Complete stores body as the response of the attempt holding token.
	Complete(ctx context.Context, s Scope, token string, body []byte) error
	// Lookup reports whether a live record exists for scope.
	Lookup(ctx context.Context, s Scope) (found bool, err error)
	// Close releases the driver's connections.
	Close() error
}

// Error is a failed operation: Code names it in the report ("unavailable",
// "transport", "quota_exceeded", "409", ...). An Indeterminate error says
// nothing about the outcome; a Refused one is the store declining and
// changing nothing (507 storage_full, 429 quota): counted, but no more a
// lost claim than an indeterminate answer is. Any other error is a
// definite, wrong answer.
type Error struct {
	Code          string
	Indeterminate bool
	Refused       bool
	Err           error // the underlying error, if any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Err.Error()
	}
	return e.Code
}

func (e *Error) Unwrap() error { return e.Err }

// Indeterminately wraps err as an indeterminate failure named code.
func Indeterminately(code string, err error) error {
	return &Error{Code: code, Indeterminate: true, Err: err}
}

// Refusal wraps err as a refusal named code: the store declined the
// operation and changed nothing.
func Refusal(code string, err error) error {
	return &Error{Code: code, Refused: true, Err: err}
}

// refusedStatus reports whether an HTTP status is a refusal that changes
// nothing: 507 (the disk is full), 429 (a quota), and 401 and 403 (a token
// the nodes do not take, or an app token without the run's principals),
// which were counted as fresh claims lost: "CORRECTNESS CHECK FAILED" for
// a run that wrote nothing.
func refusedStatus(status int) bool {
	switch status {
	case http.StatusInsufficientStorage, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return false
}

// refused reports whether err is a Refusal.
func refused(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Refused
}

// excused reports whether err breaks no rule: its outcome is unknown, or
// the store refused and changed nothing.
func excused(err error) bool {
	_, indet := errorInfo(err)
	return indet || refused(err)
}

// Definitely wraps err as a definite failure named code.
func Definitely(code string, err error) error {
	return &Error{Code: code, Err: err}
}

// errorInfo reads an error's code and whether it is indeterminate. A plain
// error (not an *Error) is a definite failure with code "error"; a
// context error is indeterminate.
func errorInfo(err error) (code string, indeterminate bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, e.Indeterminate
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "timeout", true
	}
	return "error", false
}

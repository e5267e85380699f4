package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// Problem codes of docs/API.md.
const (
	codeInvalid             = "invalid_request"
	codeRequestTooLarge     = "request_too_large"
	codeResponseTooLarge    = "response_too_large"
	codeInProgress          = "in_progress"
	codeFingerprintMismatch = "fingerprint_mismatch"
	codeQuota               = "quota_exceeded"
	codeUnavailable         = "unavailable"
	codeTokenMismatch       = "token_mismatch"
	codeAlreadyCompleted    = "already_completed"
	codeNotFound            = "not_found"
	codeUnauthorized        = "unauthorized"
	codeMethod              = "method_not_allowed"
	codeInternal            = "internal"
	codeStorageFull         = "storage_full"
)

var titles = map[string]string{
	codeInvalid:             "Invalid request",
	codeRequestTooLarge:     "Request too large",
	codeResponseTooLarge:    "Response too large to store",
	codeInProgress:          "Another attempt is in progress",
	codeFingerprintMismatch: "Key reused with a different request",
	codeQuota:               "Live-key quota exceeded",
	codeUnavailable:         "Service unavailable",
	codeTokenMismatch:       "Token is not the current one",
	codeAlreadyCompleted:    "Already completed",
	codeNotFound:            "Not found",
	codeUnauthorized:        "Unauthorized",
	codeMethod:              "Method not allowed",
	codeInternal:            "Internal error",
	codeStorageFull:         "Insufficient storage",
}

// problem is an RFC 9457 problem document with idem's `code` member.
type problem struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail"`
	Code           string `json:"code"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`

	retryAfter int
	// unexpected is a store error storeProblem knows no answer for,
	// answered 500 "internal error": the node's log names it
	// (Server.storeProblem), the caller is told nothing of it.
	unexpected error
}

func newProblem(status int, code, detail string) *problem {
	return &problem{
		Type:   "https://idem.dev/problems/" + code,
		Title:  titles[code],
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

func writeProblem(w http.ResponseWriter, p *problem) {
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Stored strings come back exactly as sent, not with <, > and & escaped.
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// storeProblem is the package's storeProblem, and logs at ERROR an error
// it knows no answer for: a 500 "internal error" left no line anywhere (a
// join that met a compaction, found by CI only from the client's side).
// At most one line every internalLogEvery, with the count since the last
// one: an error that lasts (a store broken on every request) answered
// each request of every client, each op of a batch, with a line of its
// own at ERROR.
func (s *Server) storeProblem(err error) *problem {
	p := storeProblem(err)
	if p.unexpected != nil {
		n := s.internalErrors.Add(1)
		if s.internalLog.Allow(internalLogEvery) {
			since := n - s.internalLogged.Swap(n)
			s.log.Error("a request failed with an error this node has no answer for; it was answered 500 internal error", "error", p.unexpected,
				"internal-errors", n, "since-last-line", since)
		}
	}
	return p
}

// internalLogEvery spaces storeProblem's ERROR lines.
const internalLogEvery = 10 * time.Second

// storeProblem maps every error a Store returns to its HTTP answer. Every
// store error that is not a decision means "try again": the operation either
// did not happen or its outcome is unknown, and retrying a claim with the
// same claim_id is always safe.
func storeProblem(err error) *problem {
	var p *problem
	var sealed *raftfsm.SealedError
	var refused *raftfsm.SealRefusedError
	var held *raftfsm.RetentionHeldError
	var kept *raftfsm.KeptBackError
	var removed *raftfsm.RemovedError
	var votersFull *raftfsm.VotersFullError
	var commitWait *raftfsm.CommitWaitError
	var readFailed *raftfsm.StoreReadError
	switch {
	case errors.As(err, &readFailed):
		// The node's disk failed a read of the record: never an absent
		// answer; another member may read it.
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, readFailed.Detail())
		p.retryAfter = 5
		return p
	case errors.As(err, &kept):
		// A stale read on a non-voter the leader keeps one: this node
		// cannot answer it until an operator acts; another node can.
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, kept.Detail())
		p.retryAfter = 5
		return p
	case errors.As(err, &removed):
		// A stale read on a removed node: its state no longer follows
		// the cluster's; a member answers it.
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, removed.Detail())
		p.retryAfter = 5
		return p
	case errors.As(err, &refused):
		// The leader lacks the cluster's key: an operator must act, but
		// another leader may hold it, so the client may retry.
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, refused.Detail())
		p.retryAfter = 5
		return p
	case errors.As(err, &held):
		// The cluster's first claim, refused by a leader whose --retention
		// most voters do not share: a hand-off ends it in a moment, an
		// operator otherwise.
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, held.Detail())
		p.retryAfter = 5
		if held.HandingTo != "" {
			p.retryAfter = 1
		}
		return p
	case errors.Is(err, raftfsm.ErrLogStopped):
		p = newProblem(http.StatusInsufficientStorage, codeStorageFull, "this node's raft log is stopped: the disk filled as it made the log's next segment file, so no leader can be elected here and the write was refused; nothing changed. Without a leader, reads answer 503 too, but with consistency=stale they are answered from this node's state; writes are accepted again once space is freed (the log reopens by itself)")
		p.retryAfter = 30
		return p
	case errors.Is(err, raftfsm.ErrDiskTooSmall):
		// Freeing space cannot help: the leader's disk is smaller than a
		// node needs to take writes at all.
		p = newProblem(http.StatusInsufficientStorage, codeStorageFull, "the leader's data dir is on a disk too small for it to take writes (its raft log's segments, --min-free-disk and the ballast do not fit), so the write was refused and nothing changed; reads still work. Freeing space cannot help: give the leader's data dir a larger disk (docs/DISK.md)")
		p.retryAfter = 30
		return p
	case errors.Is(err, raftfsm.ErrStorageNearlyFull):
		// The disk is above the threshold: saying it is below misled
		// whoever checked df.
		p = newProblem(http.StatusInsufficientStorage, codeStorageFull, "the leader's disk is nearly full: applying this write with those in flight (about twice their bytes) would take it under its minimum free space (--min-free-disk, or 96 MiB if that is more), so the write was refused and nothing changed; reads still work, and writes are accepted again as those in flight finish or space is freed")
		p.retryAfter = 30
		return p
	case errors.As(err, &votersFull):
		// The leader has room, but fewer voters than a quorum do: the
		// detail names them, for the operator who frees the space.
		p = newProblem(http.StatusInsufficientStorage, codeStorageFull, votersFull.Detail())
		p.retryAfter = 30
		return p
	case errors.Is(err, raftfsm.ErrStorageFull):
		// Space comes back by expiry or by an operator, not in a second:
		// a client retrying at once would only be refused again.
		p = newProblem(http.StatusInsufficientStorage, codeStorageFull, "the leader's disk is below its minimum free space (--min-free-disk, or 96 MiB if that is more: room for the raft log's next segment), so the write was refused and nothing changed; reads still work, and writes are accepted again once space is freed")
		p.retryAfter = 30
		return p
	case errors.Is(err, raftfsm.ErrEntryTooLarge):
		// The same request is refused again: no Retry-After.
		return newProblem(http.StatusRequestEntityTooLarge, codeRequestTooLarge, strings.TrimPrefix(err.Error(), "raftfsm: ")+"; nothing changed: send a smaller response")
	case errors.Is(err, raftfsm.ErrNoLeader), errors.Is(err, raftfsm.ErrNotLeader):
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, "no leader is available; retry shortly")
	case errors.As(err, &commitWait):
		// Proposed, and not committed in time: no leadership changed (the
		// unknown outcome below said it had).
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf("the leader proposed the write and the cluster did not commit it within %s (followers down or slow, or their disks full: see idem cluster status); its outcome is unknown, retry it (a claim with the same claim_id returns the same claim)", commitWait.Waited))
	case errors.Is(err, raftfsm.ErrUnknownOutcome):
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, "leadership changed while the request was in flight; its outcome is unknown, retry it (a claim with the same claim_id returns the same claim)")
	case errors.Is(err, raftfsm.ErrTimeout):
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, "the cluster did not commit the request in time; retry it")
	case errors.Is(err, raftfsm.ErrShutdown), errors.Is(err, engine.ErrClosed):
		// A closed store is a stopping node's: a request that outlived
		// the drain (--shutdown-timeout) met it, a state hash the store
		// stopped mid-way at its close (500 "internal error").
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, "the node is shutting down; retry on another node")
	case errors.Is(err, raftfsm.ErrNotProposed):
		p = newProblem(http.StatusServiceUnavailable, codeUnavailable, "leadership is changing and the request was not applied; retry it")
	case errors.As(err, &sealed):
		// Not retryable and not the caller's fault: an operator must give
		// this node the key (the node logged it too).
		return newProblem(http.StatusInternalServerError, codeInternal, sealed.Detail())
	default:
		p = newProblem(http.StatusInternalServerError, codeInternal, "internal error")
		p.unexpected = err
		return p
	}
	p.retryAfter = 1
	return p
}

package raftfsm

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotLeader means this node cannot decide; the caller should ask the
	// leader (the api package forwards). Nothing was applied.
	ErrNotLeader = errors.New("raftfsm: not the leader")
	// ErrNoLeader means the cluster has no leader right now.
	ErrNoLeader = errors.New("raftfsm: no leader")
	// ErrUnknownOutcome means the command may or may not have been applied
	// (leadership was lost after it was proposed). Retrying the same claim
	// with the same claim_id is safe.
	ErrUnknownOutcome = errors.New("raftfsm: outcome unknown")
	// ErrTimeout means the command was not committed in time.
	ErrTimeout = errors.New("raftfsm: timed out")
	// ErrShutdown means the node is shutting down.
	ErrShutdown = errors.New("raftfsm: shutting down")
	// ErrBadCommand is the result of a log entry that does not decode.
	ErrBadCommand = errors.New("raftfsm: bad command")
	// ErrNotProposed wraps errors returned before the command entered the
	// raft log: it was certainly not applied, so it may be retried on
	// another node (or a new leader) without any doubt about its outcome.
	ErrNotProposed = errors.New("raftfsm: not proposed")
	// ErrMembershipChanged, with ErrNotProposed, refuses a membership
	// change decided on a configuration another change replaced
	// meanwhile: nothing was changed, and it is decided again when asked
	// again.
	ErrMembershipChanged = errors.New("raftfsm: the cluster's membership changed while this change was decided; nothing was changed, retry it")
	// ErrConfig reports an invalid node configuration.
	ErrConfig = errors.New("raftfsm: invalid config")
)

// CommitWaitError answers a client write its leader proposed and did not
// see committed and applied within Config.ApplyTimeout: no quorum stored
// it yet (followers down, slow, or with full disks the leader had not yet
// read), or the leader's own applies wait for space. Its outcome is
// unknown: the entry stays in the raft log and is applied if a quorum
// stores it, so a retry with the same claim_id gets the same claim. The
// wait had no bound of its own: the request, and its --max-inflight slot,
// were held until space was freed on a follower.
type CommitWaitError struct{ Waited time.Duration }

func (e *CommitWaitError) Error() string {
	return fmt.Sprintf("raftfsm: outcome unknown: the write was proposed and not committed within %s", e.Waited)
}

// Is makes a CommitWaitError an ErrUnknownOutcome.
func (e *CommitWaitError) Is(target error) bool { return target == ErrUnknownOutcome }

// MaxEntryBytes is the largest raft log entry a node proposes. raft-wal
// writes an entry of any size but refuses, as corrupt, to read one over 64
// MiB (segment.MaxEntrySize): a node that had acknowledged a write of a
// 100 MiB response panicked at its next start, its log unreadable. The MiB
// below that limit holds the entry's framing, and keeps every value the
// entry stores under the 64 MiB a state snapshot's reader takes.
const MaxEntryBytes = 63 << 20

// ErrEntryTooLarge is the refusal of a command whose raft log entry would
// be over MaxEntryBytes alone: nothing was proposed, and the same command
// will be refused again (send a smaller response). A batch whose ops pass
// it only together is proposed as several entries (Node.Batch).
var ErrEntryTooLarge = errors.New("raftfsm: the raft log entry would be too large")

// EntryTooLargeError says how large the refused entry was.
type EntryTooLargeError struct{ Bytes int }

func (e *EntryTooLargeError) Error() string {
	return fmt.Sprintf("raftfsm: the request makes a raft log entry of %d bytes, more than the %d (63 MiB) one entry may hold", e.Bytes, MaxEntryBytes)
}

func (e *EntryTooLargeError) Unwrap() error { return ErrEntryTooLarge }

// checkEntrySize refuses an encoded command over MaxEntryBytes.
func checkEntrySize(data []byte) error {
	if len(data) > MaxEntryBytes {
		return &EntryTooLargeError{Bytes: len(data)}
	}
	return nil
}

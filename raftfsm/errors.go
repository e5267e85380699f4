package raftfsm

import "errors"

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
	// ErrConfig reports an invalid node configuration.
	ErrConfig = errors.New("raftfsm: invalid config")
)

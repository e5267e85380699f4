package api

import (
	"context"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// Store is what the HTTP layer needs from a node.
type Store interface {
	Claim(engine.ClaimArgs) (engine.Result, uint64, error)
	Complete(engine.TokenArgs, *engine.Response) (engine.Result, error)
	Release(engine.TokenArgs) (engine.Result, error)
	Extend(t engine.TokenArgs, leaseMs int64) (engine.Result, error)
	Delete(s engine.Scope, principalScope bool) (engine.Result, error)
	Lookup(ctx context.Context, s engine.Scope, principalScope, linearizable bool) (*engine.Record, bool, error)
	NowMs() int64
	Ready() bool
	// ForeignLeader is why this node, a one-node cluster of its own, is not
	// ready while a leader of another cluster sends it entries ("": it is
	// not; raftfsm.Node.ForeignLeader).
	ForeignLeader() string
	// Superseded is why this node answers every request 503: its cluster
	// was recovered without it ("": it was not; raftfsm.Node.Superseded).
	Superseded() string
	IsLeader() bool
	// LogStopped is raftfsm.ErrLogStopped while this node's raft log takes
	// no entries for want of space, else nil: with no leader known, a
	// write is then refused 507, not 503.
	LogStopped() error
	// CaughtUp reports whether this replica applies everything up to index
	// within a short wait (a replica under load always trails a commit index
	// by a replication round; see raftfsm.Node.CaughtUp).
	CaughtUp(index uint64) bool
	Status() (raftfsm.Status, error)
	Leader() (raftfsm.NodeInfo, bool)
	Self() raftfsm.NodeInfo
	// Join adds a node as a non-voter (or records a member's addresses);
	// Remove removes one. Both refuse, unless force, a change that would
	// leave no quorum of healthy voters (raftfsm.QuorumError).
	Join(info raftfsm.NodeInfo, force, empty bool) (raftfsm.JoinResult, error)
	Remove(id string, force bool) error
	// TransferLeadershipTo hands the leadership to the voter id, or with ""
	// to the one raft picks (raftfsm.ErrUnknownMember, ErrNotVoter).
	TransferLeadershipTo(id string) error
	// StateHashes is this replica's state hash, the hash releases before
	// December 5, 2026 gave for the same state (their state_hash: the
	// record of applied gated kinds included) and the applied index of both.
	StateHashes() (hash, withGated string, applied uint64, err error)
	// ScopeMode is the cluster's scope mode and whether its first write
	// has pinned it yet.
	ScopeMode() (mode string, pinned bool)
	// Retention is the cluster's retention of new records and whether the
	// first claim has pinned it yet; SetRetention changes it (leader only).
	Retention() (time.Duration, bool)
	SetRetention(time.Duration) error
	// BucketWidth is the cluster's bucket width and whether its first
	// command has fixed it yet.
	BucketWidth() (time.Duration, bool)
	// Backup takes a snapshot of the whole state holding every write
	// acknowledged before the call (leader only); the caller closes it.
	Backup(ctx context.Context) (*engine.Snapshot, error)
	// ClusterSecret is the key of the fencing tokens' MACs (fencing.go),
	// once the cluster has one; EnsureClusterSecret has the leader set one
	// when it has none.
	ClusterSecret() (raftfsm.ClusterSecret, bool, error)
	EnsureClusterSecret() error
}

var _ Store = (*raftfsm.Node)(nil)

package raftfsm

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idem-store/idem/wire"
)

// Membership that an operator cannot get wrong (docs/DESIGN.md invariant 9):
//
//   - a new node joins as a non-voter, and the leader promotes it to voter
//     only once it answers and has caught up (etcd's learners, Consul's
//     autopilot), so an absent or mistyped node never counts towards the
//     quorum;
//   - a change that would leave fewer healthy voters than a quorum is
//     refused unless forced, and the last voter can never be removed;
//   - health is measured by the leader, which asks every member for its
//     own view (through the PeerProbe the api package provides) every
//     half second: a node is healthy when it answered the last check, has
//     heard from the leader recently, and is not falling behind.
//
// Every leader measures for itself and finishes the promotions its
// predecessors left, so nothing depends on the node that took the join.

// Timings of the health measurement. A node that misses one check is
// unhealthy at once (a healthy node answers within probeTimeout); one that
// answers but has not heard from the leader for three seconds (a raft
// link cut while HTTP works) is unhealthy too.
const (
	probeEvery    = 500 * time.Millisecond
	probeTimeout  = time.Second
	silentAfter   = 3 * time.Second // no contact from the leader (or no check) for longer: unhealthy
	behindWindow  = 5 * time.Second // applied less than the leader had committed this long ago: unhealthy
	youngWindow   = 2 * time.Second // the same, for a leader that has not led for behindWindow yet
	promoteStable = probeEvery      // healthy and caught up this long (two answers in a row) before a promotion
)

// Stamp is a time of /v1/cluster as every time of the API is written:
// RFC 3339 UTC with milliseconds (wire.TimeLayout). A *time.Time would be
// written with nanoseconds, and without a fraction at a whole second.
type Stamp struct{ time.Time }

// MarshalJSON writes s in wire.TimeLayout; a time.Time's own
// UnmarshalJSON, promoted, reads it back.
func (s Stamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + s.UTC().Format(wire.TimeLayout) + `"`), nil
}

func stamp(t time.Time) *Stamp { return &Stamp{t.UTC()} }

// Member is one node as /v1/cluster shows it. The fields after Healthy are
// the measurements healthy is judged by, taken by the leader (Status's
// HealthFrom) at CheckedAt; they are null where nothing was measured.
type Member struct {
	NodeInfo
	Suffrage string `json:"suffrage"`
	Healthy  bool   `json:"healthy"`
	// LastContactMs is how long ago the node last heard from the leader.
	LastContactMs *int64 `json:"last_contact_ms"`
	// AppliedIndex is the node's applied index at its last answer to the
	// leader's checks, and Lag how far it was behind the leader's commit
	// index then: null when it did not answer the last check (stopped, or
	// cut off), being behind by whatever was committed since.
	AppliedIndex *uint64 `json:"applied_index"`
	Lag          *uint64 `json:"lag"`
	// StateAppliedIndex is the index the node's state store holds
	// (engine.Meta.Applied) at CheckedAt (null: not measured, or a release
	// that does not say). Right after a restart raft's applied index is
	// its newest snapshot's (0 without one) until raft has replayed its
	// log, while the store already holds what it applied before the stop
	// (and /readyz goes by it). Shown beside AppliedIndex, never in its
	// place: health, promotion and the other decisions go by raft's.
	StateAppliedIndex *uint64 `json:"state_applied_index,omitempty"`
	// CheckedAt is the leader's last attempt to measure the node, and
	// CheckedMsAgo its age when this status was made.
	CheckedAt    *Stamp `json:"checked_at"`
	CheckedMsAgo *int64 `json:"checked_ms_ago"`
	// UnhealthyReason says why Healthy is false.
	UnhealthyReason string `json:"unhealthy_reason,omitempty"`
	// NotPromoted says why a healthy, caught-up non-voter is kept one.
	NotPromoted string `json:"not_promoted,omitempty"`
	// CommittedSuffrage is set while the configuration Status lists is
	// not committed (Status.ConfigurationPending) on a member that change
	// touches: what it is in the last configuration this node saw
	// committed ("Voter", "Nonvoter", or "none" for a node being added).
	// Empty when the change leaves it as it was, or when this node has
	// seen no committed configuration since it started.
	CommittedSuffrage string `json:"committed_suffrage,omitempty"`
	// Downgraded says that the node was started again on an earlier
	// release (a downgrade in place): while this leader led it answered
	// one health check listing features its Apply knows and a later one
	// without some of them, or, a voter, it answers without a feature
	// the replicated state shows in use (whoever led when it was
	// stopped). Such a release skips the entries that need them, so its
	// state may lack writes the others hold. Cleared when the node
	// answers with an applied index of 0 (an empty data dir: its state
	// was rebuilt).
	Downgraded string `json:"downgraded,omitempty"`
	// Keys are the keys of the node's --encryption-key-file as the
	// leader's last health check saw them (its own, on the leader): an
	// empty list when it holds none, null when not known (not measured,
	// or a release that does not report them). An operator rotating keys
	// checks here that every node holds the new key before making it the
	// first (rotation step 2).
	Keys []NodeKey `json:"keys"`
	// CertNotAfter and CANotAfter are when the node's TLS certificate and
	// the first of its CAs expire, as the leader's last health check saw
	// them (its own, on the leader); null without TLS or not known. A
	// certificate that expires while the node runs breaks no connection
	// already made, so the node looks healthy until its connections are
	// made again (a restart, a network fault): these say so beforehand.
	CertNotAfter *Stamp `json:"cert_not_after,omitempty"`
	CANotAfter   *Stamp `json:"ca_not_after,omitempty"`
	// ClockOffsetMs is the node's wall clock minus the leader's, as the
	// leader's last health check measured it (to within half the check's
	// round trip, ClockUncertaintyMs); 0 on the leader, null when not
	// measured. Expiry does not depend on it (cluster time), but TLS
	// certificates are judged by it and the nodes' logs line up by it.
	ClockOffsetMs      *int64 `json:"clock_offset_ms,omitempty"`
	ClockUncertaintyMs *int64 `json:"clock_uncertainty_ms,omitempty"`
	// Version is the release the node runs, as the leader's last health
	// check read it (its own, on the leader); empty when not known.
	Version string `json:"version,omitempty"`
}

// FeatureRetention, in a node's Status.Features (and its /healthz), says
// its Apply knows the cluster's retention (OpSetRetention). A node without
// it skips that entry and, leading, gives claims its own --retention.
const FeatureRetention = "cluster-retention"

// features are what this release's Apply knows that earlier ones did not
// and that the leader checks before making a node a voter.
var features = []string{FeatureRetention, FeatureKeyCheck, FeatureCredentialCap}

// FeatureCredentialCap, in a node's Status.Features, says its Apply
// decodes and enforces a claim's credential cap (an app token's
// max_principals: engine.ClaimArgs.CredentialMaxPrincipals). A leader
// writes the cap into claims only once every member lists it; until then
// it checks the cap against its own applied state, best effort
// (Node.capGate).
const FeatureCredentialCap = "credential-max-principals"

// Kinds of gated entries the applied state records (engine.Meta.Gated):
// entries a release without the feature skips, set by Apply on the first.
// Entries applied by a release before this record (which recorded none)
// count from the next one on.
const (
	// gatedCredentialCap: a claim that carried its credential's cap
	// (flagCredentialCap), in an entry of its own or in a batch.
	gatedCredentialCap uint64 = 1 << iota
)

// usedFeatures are the features this state shows in use: the cluster's
// retention is pinned (FeatureRetention), a key's check value is recorded
// (FeatureKeyCheck), a claim carrying its credential's cap was applied
// (FeatureCredentialCap). A member of a release lacking one skipped, or
// skips, entries the others applied, or leading decides without them. It
// is replicated state, so every leader of any term reads the same.
func (n *Node) usedFeatures() []string {
	var used []string
	m := n.db.Meta()
	if m.RetentionMs != 0 {
		used = append(used, FeatureRetention)
	}
	if len(n.fsm.keys.recordedChecks()) > 0 {
		used = append(used, FeatureKeyCheck)
	}
	if m.Gated&gatedCredentialCap != 0 {
		used = append(used, FeatureCredentialCap)
	}
	return used
}

// FeatureKeyCheck, in a node's Status.Features, says its Apply records the
// check values of encryption keys (OpKeyCheck) and its status lists its
// keys (Status.Keys). A leader proposes OpKeyCheck only once every member
// lists it, and does not make a node without it a voter of a cluster whose
// stored values are encrypted.
const FeatureKeyCheck = "key-check"

// NodeKey is one key of a node's --encryption-key-file as its status shows
// it: the id and the key's check value (hex), which proves the key without
// revealing it.
type NodeKey struct {
	ID    string `json:"id"`
	Check string `json:"check"`
}

// Status is the cluster as this node sees it.
type Status struct {
	Self   NodeInfo  `json:"self"`
	Leader *NodeInfo `json:"leader"`
	Nodes  []Member  `json:"nodes"`
	// Version is the release this node runs (Config.Version).
	Version string `json:"version,omitempty"`
	// WallMs is this node's wall clock, for nodes agreeing on a new
	// cluster's first time (see ttl.Clock.Correct).
	WallMs       int64  `json:"wall_ms"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// StateAppliedIndex is the index this node's state store holds
	// (engine.Meta.Applied; Member.StateAppliedIndex), read after
	// AppliedIndex. For display only.
	StateAppliedIndex *uint64 `json:"state_applied_index,omitempty"`
	// LastLeaderContactMs is how long ago this node last heard from a
	// leader (0 on the leader, null when it never has): what the leader's
	// measurement of this node reads.
	LastLeaderContactMs *int64 `json:"last_leader_contact_ms"`
	// HealthFrom is the node whose measurements the nodes' health shows:
	// the leader. Empty when no leader's measurements were available.
	HealthFrom string `json:"health_from,omitempty"`
	// Features are what this node's Apply knows (FeatureRetention); a
	// node of an earlier release lists none.
	Features []string `json:"features,omitempty"`
	// Keys are the keys of this node's --encryption-key-file (none without
	// one), so the leader can tell whether it may make the node a voter.
	Keys []NodeKey `json:"keys,omitempty"`
	// Scope is the scope mode this node decides claims with: its cluster's
	// once the first write fixed it, else its --scope. The API sets it (the
	// flag is the API's); a node of an earlier release leaves it empty.
	// Nodes about to form a cluster, and a leader taking in a node joined
	// by hand, compare it.
	Scope string `json:"scope,omitempty"`
	// BootstrapExpect is this node's --bootstrap-expect (0 without it).
	// The API sets it, as Scope; nodes about to form a cluster with it
	// compare it, since nodes expecting different counts would each
	// bootstrap a configuration of their own.
	BootstrapExpect int `json:"bootstrap_expect,omitempty"`
	// RetentionFlag is this node's --retention (not the cluster's, which
	// GET /v1/config publishes). The API sets it, as BootstrapExpect: the
	// first claim pins the retention of the node that leads it, so nodes
	// about to form a cluster compare it.
	RetentionFlag string `json:"retention_flag,omitempty"`
	// Auth is "tokens" when this node's API checks bearer tokens
	// (--auth-file), "none" when it serves every route to anyone; an
	// earlier release leaves it empty. A leader that checks tokens keeps a
	// non-voter answering "none" back (notPromotable).
	Auth string `json:"auth,omitempty"`
	// HoldsVote is set while this node, which started with an empty data
	// dir, neither votes for a candidate that may miss acknowledged writes
	// nor stands for election (votehold.go's voteHold and campaignHold): an
	// operator looking for why no leader is elected sees it here.
	HoldsVote *VoteHoldStatus `json:"holds_vote,omitempty"`
	// ConfigurationPending says the membership Nodes lists is in this
	// node's raft log past its commit index: a leader lists a change (a
	// promotion, a removal) as soon as it appends it, and it holds only
	// once a quorum has stored it. Stopped before that, the change may be
	// lost: a node shown as a new voter stays a non-voter. Each member it
	// touches says what it was (Member.CommittedSuffrage).
	ConfigurationPending bool `json:"configuration_pending,omitempty"`
	// PendingRemoved are the members of the last configuration this node
	// saw committed that the pending change removes: still counted until
	// it commits.
	PendingRemoved []string `json:"pending_removed,omitempty"`
	// CertNotAfter and CANotAfter are when this node's TLS certificate
	// and the first of its CAs expire (absent without TLS).
	CertNotAfter *Stamp `json:"cert_not_after,omitempty"`
	CANotAfter   *Stamp `json:"ca_not_after,omitempty"`
	// Gated is this node's own applied state's record of gated entries
	// applied (engine.Meta.Gated), read after AppliedIndex (absent from a
	// release without the record). A leader compares it with its own: a
	// caught-up node whose state lacks a kind its own records skipped
	// those entries on an earlier release, and an upgrade on its data dir
	// does not apply them again (notPromotable).
	Gated *uint64 `json:"gated,omitempty"`
	// Superseded is why this node answers every request but this status
	// 503 (Node.Superseded: a recovery or restore of its cluster left it
	// out), "" otherwise. The API sets it: the status is all such a node
	// still answers, and its table alone looked like a healthy cluster.
	Superseded string `json:"superseded,omitempty"`
	// Removed says that this node is outside the cluster's configuration
	// (removed, Node.Outside), with the command that adds it back; ""
	// otherwise. The API sets it, as Superseded: such a node knows no
	// leader and its table showed every member unhealthy and "fewer
	// healthy voters than a quorum", a cluster lost at first sight.
	Removed string `json:"removed,omitempty"`
	// DiskFull is set while this node's disk is under its storage-full
	// threshold or its applies wait for space (disk.go): a follower then
	// takes no raft entries and falls behind, and the leader's health
	// check says why rather than only that it lags.
	DiskFull *DiskFull `json:"disk_full,omitempty"`
	// WritesRefused is set by a leader (and passed on by MergeHealth)
	// while it refuses client writes because fewer voters than a quorum
	// have room on their disks (quorumroom.go): the problem's detail.
	// Those voters lag nothing then (nothing is proposed), and the table
	// alone read as a healthy cluster.
	WritesRefused string `json:"writes_refused,omitempty"`
}

// DiskFull is a node's full disk, as its Status says it.
type DiskFull struct {
	DataDir        string `json:"data_dir"`
	FreeBytes      uint64 `json:"free_bytes"`
	FullBelowBytes uint64 `json:"full_below_bytes"`
	// ApplyWaits: applies or Pebble writes wait for space.
	ApplyWaits bool `json:"apply_waits,omitempty"`
	// SnapshotRefusedAfterBytes is set while the node refuses the
	// leader's snapshot for lack of room (the last refusal within a
	// minute): how much of it it had received. Such a follower can be
	// above the threshold (the snapshot, and its restore, need more room
	// than is left above it), and was named only as having applied nothing.
	SnapshotRefusedAfterBytes uint64 `json:"snapshot_refused_after_bytes,omitempty"`
	// AppendsRefusedNeedBytes is set while the follower refuses the
	// leader's entries because applying them, with the UnappliedBytes of
	// entries it holds and has not applied, would take its disk under
	// FullBelowBytes (the last refusal within a minute, until an append
	// goes through): the free space it needed for them.
	AppendsRefusedNeedBytes uint64 `json:"appends_refused_need_bytes,omitempty"`
	UnappliedBytes          uint64 `json:"unapplied_bytes,omitempty"`
	// RaftLogStopped is set while the node's raft log takes no entries: the
	// disk filled as it made the log's next segment file (usually with the
	// guard off, --min-free-disk 0). It reopens at the next append once
	// there is room for one.
	RaftLogStopped bool `json:"raft_log_stopped,omitempty"`
}

// String is the reason a health check or /readyz gives for a node whose
// disk is full.
func (d *DiskFull) String() string {
	var s string
	if d.RaftLogStopped {
		return fmt.Sprintf("its raft log is stopped: the disk filled as it made the log's next segment file, so it takes no raft entries; %d bytes free on its data dir %s (docs/DISK.md); it reopens the log by itself once space is freed there", d.FreeBytes, d.DataDir)
	}
	if d.SnapshotRefusedAfterBytes != 0 && d.FreeBytes >= d.FullBelowBytes && !d.ApplyWaits {
		return fmt.Sprintf("its disk has no room for the leader's snapshot: it refused it after %d bytes (restoring them writes as much again), "+
			"with %d bytes free on its data dir %s and writes stopping under %d (docs/DISK.md); it installs it by itself once space is freed there",
			d.SnapshotRefusedAfterBytes, d.FreeBytes, d.DataDir, d.FullBelowBytes)
	}
	if d.AppendsRefusedNeedBytes != 0 && d.FreeBytes >= d.FullBelowBytes && !d.ApplyWaits {
		// With nothing left to apply, it refuses the same entries at every
		// try (the leader resends them): only freed space ends it.
		held, then := "", "it takes them once space is freed there (it has applied all it holds, and the leader sends the same entries again)"
		if d.UnappliedBytes != 0 {
			held = fmt.Sprintf(", with the %d bytes of entries it holds and has not applied yet,", d.UnappliedBytes)
			then = "it goes on by itself as its applies catch up, or once space is freed there"
		}
		return fmt.Sprintf("its disk is nearly full: it takes no more raft entries from the leader, as applying them (which writes about twice their bytes)%s would take it under %d: "+
			"%d bytes free on its data dir %s, %d needed (docs/DISK.md); %s",
			held, d.FullBelowBytes, d.FreeBytes, d.DataDir, d.AppendsRefusedNeedBytes, then)
	}
	if d.FullBelowBytes == 0 { // --min-free-disk 0: only a Pebble write held for space
		s = fmt.Sprintf("its disk is full: %d bytes free on its data dir %s, and its store's writes wait for space (--min-free-disk 0; docs/DISK.md)", d.FreeBytes, d.DataDir)
	} else {
		s = fmt.Sprintf("its disk is full: %d bytes free on its data dir %s, under the %d it needs to take raft entries (--min-free-disk; docs/DISK.md)", d.FreeBytes, d.DataDir, d.FullBelowBytes)
		if d.ApplyWaits {
			s += ", and its applies wait for space"
		}
	}
	return s + "; it catches up by itself once space is freed there"
}

// VoteHoldStatus is what a node holding its vote votes from: the term and
// commit index a leader named when it first reached the node, zero while
// no leader has (it then votes only in a new cluster's first election).
type VoteHoldStatus struct {
	LeaderTerm        uint64 `json:"leader_term"`
	LeaderCommitIndex uint64 `json:"leader_commit_index"`
}

// PeerProbe asks the node at httpAddr for its own Status, as it answers
// GET /v1/cluster to another node (without asking anyone else in turn).
type PeerProbe func(ctx context.Context, httpAddr string) (Status, error)

// NotMeasuredYet starts the unhealthy reason of a member the leader has
// not checked yet: a status taken right after an election or a join, not
// a sign that the member is down.
const NotMeasuredYet = "not measured yet"

// DidNotAnswer starts the unhealthy reason of a member that answered the
// leader once but not its last check (stopped, or cut off): its lag is not
// known then (Member.Lag is null), and cluster status says so.
const DidNotAnswer = "did not answer the last check"

// peerProbe is the PeerProbe SetPeerProbe set, nil before.
func (n *Node) peerProbe() PeerProbe {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	return n.peers.probe
}

// SetPeerProbe sets how the leader reaches the other members to measure
// their health. Until it is set, every other member shows unhealthy and no
// non-voter is promoted.
func (n *Node) SetPeerProbe(p PeerProbe) {
	n.peers.mu.Lock()
	n.peers.probe = p
	n.peers.mu.Unlock()
}

// AddBackCommand is the command that adds node back to a cluster, ready
// to paste: member is a member's HTTP address to ask, "" for a placeholder
// without angle brackets, which a shell would take for a redirection.
func AddBackCommand(node NodeInfo, member string) string {
	if member == "" {
		member = "MEMBER_HTTP_ADDR"
	}
	return fmt.Sprintf("%s cluster join --id %s --raft-addr %s --node-http-addr %s --addr %s", CommandName, node.ID, ShellWord(node.RaftAddr), ShellWord(node.HTTPAddr), ShellWord(member))
}

// Errors of membership changes. (They live here rather than in errors.go
// because they carry the details the operator needs.)
var (
	// ErrUnknownMember means no node of that id is in the configuration.
	ErrUnknownMember = errors.New("raftfsm: no such member")
	// ErrNotVoter means a leadership transfer named a non-voter.
	ErrNotVoter = errors.New("raftfsm: not a voter")
	// ErrLacksKey means a leadership transfer named a voter without a key
	// stored values are sealed under.
	ErrLacksKey = errors.New("raftfsm: lacks a key in use")
	// ErrRefusesNodes means a leadership transfer named a voter that
	// refuses the cluster's node token: leading, the other nodes could not
	// learn their readiness from it.
	ErrRefusesNodes = errors.New("raftfsm: leadership transfer refused")
	// ErrWouldLoseQuorum means the change was refused (see QuorumError).
	ErrWouldLoseQuorum = errors.New("raftfsm: would lose quorum")
	// ErrAddressInUse means another member already has that address.
	ErrAddressInUse = errors.New("raftfsm: address in use by another member")
	// ErrIDInUse means a join named a member's id from other addresses
	// while that member still answers at its own.
	ErrIDInUse = errors.New("raftfsm: node id in use by a live member")
	// ErrNotAnswering means a join would move a voter to addresses where
	// that node does not answer.
	ErrNotAnswering = errors.New("raftfsm: node does not answer at its new addresses")
	// ErrForeignCluster means a join named a node that holds a cluster of
	// its own: taking it in would mix that cluster's records into this one.
	ErrForeignCluster = errors.New("raftfsm: node holds a cluster of its own")
	// ErrTokenRefused marks a PeerProbe refused for this node's token (the
	// probe wraps it), and a join refused for that reason: the node runs
	// with another --auth-file, so the leader can neither tell whether it
	// holds a cluster of its own nor ever measure it healthy.
	ErrTokenRefused = errors.New("raftfsm: the node refuses this cluster's node token")
)

// ErrNoNodeToken marks a PeerProbe refused because this node has no node
// token to send (--auth-file without --node-token-file): the fault is
// here, not in the other node's auth file. It is an ErrTokenRefused.
var ErrNoNodeToken = fmt.Errorf("%w: this node has no node token to send", ErrTokenRefused)

// QuorumError is a refused membership change: afterwards fewer voters than
// a quorum would be healthy, or no voter would be left at all. It wraps
// ErrWouldLoseQuorum.
type QuorumError struct {
	Change    string            // "removing n2", "adding n4"
	Voters    []string          // voters after the change
	Healthy   []string          // those of them measured healthy
	Unhealthy map[string]string // the others, with why
	// LastVoter: the change would leave no voter; no force overrides it.
	LastVoter bool
}

func (e *QuorumError) Error() string {
	if e.LastVoter {
		return fmt.Sprintf("%s would leave no voter: the cluster could decide nothing more, and force does not change that; add another node first (it is promoted to voter once it has caught up), then repeat", e.Change)
	}
	var b strings.Builder
	need := len(e.Voters)/2 + 1
	healthy := "none is healthy"
	if len(e.Healthy) > 0 {
		healthy = fmt.Sprintf("only %s %s healthy", strings.Join(e.Healthy, ", "), isAre(len(e.Healthy)))
	}
	fmt.Fprintf(&b, "%s would leave %d voter%s (%s) of which %s, fewer than the %d a quorum needs",
		e.Change, len(e.Voters), plural(len(e.Voters)), strings.Join(e.Voters, ", "), healthy, need)
	if len(e.Unhealthy) > 0 {
		ids := make([]string, 0, len(e.Unhealthy))
		for id := range e.Unhealthy {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		b.WriteString("; unhealthy: ")
		for i, id := range ids {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (%s)", id, e.Unhealthy[id])
		}
	}
	b.WriteString(". Bring the unhealthy nodes back first; force makes the change anyway, and the cluster then accepts no writes until a quorum of its voters answers")
	return b.String()
}

func (e *QuorumError) Unwrap() error { return ErrWouldLoseQuorum }

// PendingError is a forced change that is in the leader's log but could not
// commit: the remaining voters have no quorum. It takes effect once enough
// of them answer.
type PendingError struct{ Change string }

func (e *PendingError) Error() string {
	return fmt.Sprintf("%s is in the old leader's log but not committed: too few of the remaining voters answer. It takes effect once a quorum of them answers and elects a leader holding it (the old leader, usually); check with idem cluster status, and repeat it if it did not", e.Change)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// Status returns the cluster membership and raft progress, with the
// members' health as this node measured it when it leads.
func (n *Node) Status() (Status, error) {
	st := Status{Self: n.self, Version: n.cfg.Version, WallMs: n.clock.WallMs(), Term: n.term(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(), Nodes: []Member{},
		Features: features, Keys: n.nodeKeys()}
	leader, hasLeader := n.Leader()
	if hasLeader {
		st.Leader = &leader
	}
	if t := n.cfg.TLS; t != nil {
		st.CertNotAfter, st.CANotAfter = stamp(t.NotAfter()), stamp(t.CANotAfter())
	}
	// Read after AppliedIndex: it only grows, so it covers that index.
	meta := n.db.Meta()
	st.Gated, st.StateAppliedIndex = ptr(meta.Gated), ptr(meta.Applied)
	st.Scope = n.scopeMode() // the API sets the same (its flag is this node's Scope)
	if n.cfg.Retention > 0 {
		st.RetentionFlag = n.cfg.Retention.String() // the API sets the same
	}
	st.Auth = AuthMode(n.cfg.ChecksTokens) // the API sets the same
	st.DiskFull = n.disk.fullStatus()
	if n.LogStopped() != nil {
		if st.DiskFull == nil {
			st.DiskFull = &DiskFull{DataDir: n.disk.dir, FreeBytes: n.disk.free.Load(), FullBelowBytes: n.disk.fullBelow}
		}
		st.DiskFull.RaftLogStopped = true
	}
	if n.voteHeld() { // votehold.go; refreshMembership releases it once it may
		m := n.voteMark()
		st.HoldsVote = &VoteHoldStatus{LeaderTerm: m.term, LeaderCommitIndex: m.index}
	}
	now := time.Now()
	isLeader := n.IsLeader()
	if isLeader {
		st.LastLeaderContactMs = ptr(int64(0))
	} else if lc := n.raft.LastContact(); !lc.IsZero() {
		st.LastLeaderContactMs = ptr(now.Sub(lc).Milliseconds())
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return st, mapRaftError(err)
	}
	named, _ := n.db.Named("node/")
	st.ConfigurationPending = n.configPending()
	before := n.committed.see(f.Configuration(), st.ConfigurationPending)
	for _, s := range f.Configuration().Servers {
		m := Member{NodeInfo: NodeInfo{ID: string(s.ID), RaftAddr: string(s.Address)}, Suffrage: s.Suffrage.String()}
		if was, ok := before[string(s.ID)]; before != nil && (!ok || was != s.Suffrage) {
			m.CommittedSuffrage = "none"
			if ok {
				m.CommittedSuffrage = was.String()
			}
		}
		if b, ok := named["node/"+string(s.ID)]; ok {
			var info NodeInfo
			if json.Unmarshal(b, &info) == nil {
				m.HTTPAddr = info.HTTPAddr
			}
		}
		if string(s.ID) == n.self.ID {
			m.HTTPAddr = n.self.HTTPAddr
		}
		st.Nodes = append(st.Nodes, m)
	}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		if !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			st.PendingRemoved = append(st.PendingRemoved, id)
		}
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].ID < st.Nodes[j].ID })
	if isLeader {
		st.HealthFrom = n.self.ID
		if err := n.votersRoom(OpClaim); err != nil {
			st.WritesRefused = err.(*VotersFullError).Detail()
		}
		n.peers.mu.Lock()
		fresh := n.peers.term == st.Term
		for i := range st.Nodes {
			m := &st.Nodes[i]
			if m.ID == n.self.ID {
				m.Healthy = true
				m.LastContactMs, m.AppliedIndex, m.Lag = ptr(int64(0)), ptr(st.AppliedIndex), ptr(sub(st.CommitIndex, st.AppliedIndex))
				m.StateAppliedIndex = st.StateAppliedIndex
				m.CheckedAt, m.CheckedMsAgo = stamp(now), ptr(int64(0))
				m.Keys = ownKeys(st.Keys)
				m.CertNotAfter, m.CANotAfter = st.CertNotAfter, st.CANotAfter
				m.ClockOffsetMs, m.ClockUncertaintyMs = ptr(int64(0)), ptr(int64(0))
				m.Version = st.Version
				continue
			}
			h := n.peers.byID[m.ID]
			if !fresh {
				m.UnhealthyReason = NotMeasuredYet + " (this node became leader moments ago)"
				continue
			}
			if h == nil {
				m.UnhealthyReason = NotMeasuredYet + " (it joined after the leader's last health check, or has never answered one)"
				continue
			}
			h.fill(m, now)
			m.Healthy, m.UnhealthyReason = n.judge(h, raft.ServerID(m.ID), now)
			if m.Suffrage == raft.Nonvoter.String() {
				m.NotPromoted = n.notPromotable(h)
			}
		}
		n.peers.mu.Unlock()
		return st, nil
	}
	// A follower measures only itself; the api package asks the leader for
	// the rest (MergeHealth).
	for i := range st.Nodes {
		m := &st.Nodes[i]
		if m.ID != n.self.ID {
			m.UnhealthyReason = "not measured by this node: only the leader measures health"
			continue
		}
		m.AppliedIndex, m.CheckedAt, m.CheckedMsAgo = ptr(st.AppliedIndex), stamp(now), ptr(int64(0))
		m.StateAppliedIndex = st.StateAppliedIndex
		m.LastContactMs, m.Keys = st.LastLeaderContactMs, ownKeys(st.Keys)
		m.CertNotAfter, m.CANotAfter = st.CertNotAfter, st.CANotAfter
		m.Version = st.Version
		switch {
		case !hasLeader:
			m.UnhealthyReason = "knows no leader"
		case st.LastLeaderContactMs == nil || *st.LastLeaderContactMs > silentAfter.Milliseconds():
			m.UnhealthyReason = "no recent contact from the leader"
		default:
			m.Healthy = true
		}
	}
	return st, nil
}

// MergeHealth takes the members' health from the leader's status, for a
// follower showing the whole cluster. Members the leader does not show
// keep this node's view.
func (s *Status) MergeHealth(leader Status) {
	byID := map[string]Member{}
	for _, m := range leader.Nodes {
		byID[m.ID] = m
	}
	for i := range s.Nodes {
		m := &s.Nodes[i]
		if l, ok := byID[m.ID]; ok {
			m.Healthy, m.LastContactMs, m.AppliedIndex, m.Lag = l.Healthy, l.LastContactMs, l.AppliedIndex, l.Lag
			m.StateAppliedIndex = l.StateAppliedIndex
			m.CheckedAt, m.CheckedMsAgo, m.UnhealthyReason, m.NotPromoted = l.CheckedAt, l.CheckedMsAgo, l.UnhealthyReason, l.NotPromoted
			m.Downgraded = l.Downgraded
			if l.Keys != nil || m.ID != s.Self.ID {
				m.Keys = l.Keys // a leader of an earlier release shows none: this node's own stay
			}
			m.ClockOffsetMs, m.ClockUncertaintyMs = l.ClockOffsetMs, l.ClockUncertaintyMs
			if l.Version != "" || m.ID != s.Self.ID {
				m.Version = l.Version // a leader of an earlier release shows none: this node's own stays
			}
			if l.CertNotAfter != nil || m.ID != s.Self.ID {
				m.CertNotAfter, m.CANotAfter = l.CertNotAfter, l.CANotAfter
			}
		}
	}
	s.HealthFrom = leader.HealthFrom
	s.WritesRefused = leader.WritesRefused
}

// ownKeys is a node's own keys for its row of the status: an empty list,
// not null, when it holds none (it knows it holds none).
func ownKeys(k []NodeKey) []NodeKey {
	if k == nil {
		return []NodeKey{}
	}
	return k
}

func ptr[T any](v T) *T { return &v }

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// JoinResult is how a node stands after Join.
type JoinResult struct {
	// Suffrage is "voter" or "nonvoter".
	Suffrage string
	// Existing: the node was a member already; only its addresses were
	// recorded (and its raft address changed when it differed).
	Existing bool
	// MovedFrom is the member's raft address before this join, when the
	// join moved it.
	MovedFrom string
	// AdmittedIndex is a log index at or past the configuration that lists
	// the node: a node that joined empty has caught up past its admission
	// once its own log reaches it (joining.go).
	AdmittedIndex uint64
	// RanBefore: the node is a voter whose addresses the state recorded
	// before this join, the same ones: it ran at them as a member before.
	// A node that started empty says so (an empty data dir in a running
	// voter's place); a member of a new cluster's first configuration has
	// no addresses recorded before its own first join.
	RanBefore bool
}

// Join adds a node as a non-voter (the leader promotes it once it has
// caught up), recording its addresses in the log first so every node can
// forward to it. A member joining again only has its addresses recorded.
// Unless force, a change of the configuration is refused (QuorumError)
// when the cluster has no quorum of healthy voters.
func (n *Node) Join(info NodeInfo, force, empty bool) (JoinResult, error) {
	if n.raft.State() != raft.Leader {
		return JoinResult{}, n.notLeader()
	}
	n.confChange.Lock()
	defer n.confChange.Unlock()
	if n.raft.State() != raft.Leader {
		return JoinResult{}, n.notLeader() // deposed while it waited for the lock (stillLeading)
	}
	conf, confIndex, err := n.latestConfiguration()
	if err != nil {
		return JoinResult{}, n.stillLeading(err)
	}
	named, _ := n.db.Named("node/")
	var existing *raft.Server
	for i, s := range conf.Servers {
		if string(s.ID) == info.ID {
			existing = &conf.Servers[i]
			continue
		}
		if string(s.Address) == info.RaftAddr {
			return JoinResult{}, fmt.Errorf("%w: raft address %s is %s's", ErrAddressInUse, info.RaftAddr, s.ID)
		}
		var other NodeInfo
		if json.Unmarshal(named["node/"+string(s.ID)], &other) == nil && other.HTTPAddr == info.HTTPAddr {
			return JoinResult{}, fmt.Errorf("%w: HTTP address %s is %s's", ErrAddressInUse, info.HTTPAddr, s.ID)
		}
		// Another member's address of the other kind: a join given a
		// member's HTTP address as --raft-addr (or its raft address as
		// --node-http-addr) for a node not started yet was recorded there,
		// the member answering neither as the joiner, and the joiner was
		// never reached nor promoted (a review of the address checks).
		if other.HTTPAddr != "" && other.HTTPAddr == info.RaftAddr {
			return JoinResult{}, fmt.Errorf("%w: raft address %s is %s's HTTP address (check --raft-addr: it takes the joining node's serve --raft-addr)", ErrAddressInUse, info.RaftAddr, s.ID)
		}
		if string(s.Address) == info.HTTPAddr {
			return JoinResult{}, fmt.Errorf("%w: HTTP address %s is %s's raft address (check --node-http-addr: it takes the joining node's serve --http-addr)", ErrAddressInUse, info.HTTPAddr, s.ID)
		}
	}
	if existing == nil && !empty && n.guard != nil && n.guard.leftOut.leftOut(info.ID) {
		// Its log would be replaced by this cluster's, but its state kept,
		// past this cluster's entries at the indexes it had applied.
		// The id alone tells: a node of that id that joined empty since,
		// and was removed again, is refused too (it was told, as a
		// removed node, that a join adds it back: an operator walk).
		return JoinResult{}, fmt.Errorf("%w: %s was left out when %s made %s this cluster (on %s), and a node of that id that holds state may hold the older state it kept, which would mix with this cluster's; this is refused by id, also for a node %s that joined this cluster empty since and was removed again. Move its data dir aside and start it with an empty data dir and --join",
			ErrForeignCluster, info.ID, n.guard.leftOut.by(), n.cfg.NodeID, n.guard.leftOut.At.Format(time.RFC3339), info.ID)
	}
	res := JoinResult{Suffrage: "nonvoter", Existing: existing != nil}
	if existing != nil && existing.Suffrage == raft.Voter {
		res.Suffrage = "voter"
		var stored NodeInfo
		res.RanBefore = string(existing.Address) == info.RaftAddr && json.Unmarshal(named["node/"+info.ID], &stored) == nil &&
			stored.RaftAddr == info.RaftAddr && stored.HTTPAddr == info.HTTPAddr
	}
	if existing != nil && string(existing.Address) != info.RaftAddr {
		res.MovedFrom = string(existing.Address)
	}
	if existing != nil && !force {
		var stored NodeInfo
		json.Unmarshal(named["node/"+info.ID], &stored)
		if stored.HTTPAddr != "" && info.RaftAddr == stored.HTTPAddr && info.HTTPAddr == string(existing.Address) {
			return res, swappedAddrs(info, fmt.Sprintf("%s is recorded at raft %s, HTTP %s", info.ID, existing.Address, stored.HTTPAddr))
		}
	}
	if existing != nil && string(existing.Address) != info.RaftAddr && !force {
		if err := n.idInUse(*existing, named, info.RaftAddr); err != nil {
			return res, err
		}
		if empty && existing.Suffrage == raft.Voter {
			// A voter that moved brings its state; a node that has none
			// and takes a stopped voter's id (a forgotten --node-id
			// defaulting to n1, a copied command) would vote at once,
			// empty: it could elect a leader that lacks committed entries.
			return res, fmt.Errorf("%w: %s is a voter of this cluster and the joining node holds no state: an empty node in a voter's place could elect a leader missing acknowledged writes. If %s is gone for good, remove it (idem cluster remove --id %s) and join this node, which starts as a non-voter and votes once it has caught up; otherwise give it another --node-id, or start %s on its own data dir", ErrIDInUse, info.ID, info.ID, info.ID, info.ID)
		}
	}
	// The joining node is asked once at its HTTP address, for both checks
	// below: a node not started on a host that does not answer yet costs
	// each question its whole timeout, and a join by hand forwarded by a
	// follower must answer within the follower's wait.
	var heard *joinerAnswer
	hear := func() joinerAnswer {
		if heard == nil {
			heard = &joinerAnswer{}
			if probe := n.peerProbe(); probe != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
				heard.st, heard.err = probe(ctx, info.HTTPAddr)
				cancel()
				heard.asked, heard.probe = true, probe
			}
		}
		return *heard
	}
	if existing == nil {
		if err := n.notForeign(info, conf, hear()); err != nil {
			return res, err
		}
	}
	if !force {
		voter := existing != nil && existing.Suffrage == raft.Voter
		var stored NodeInfo
		if existing != nil {
			json.Unmarshal(named["node/"+info.ID], &stored)
		}
		// A voter whose raft address stays and whose HTTP address changes
		// is asked too: one started on a new --http-addr joins from there
		// and answers; a typo in cluster join was recorded (a membership
		// walk), and health checks and forwarding went to it until the
		// voter restarted. A voter of a first configuration has no HTTP
		// address recorded before its own join.
		httpMoves := stored.HTTPAddr != info.HTTPAddr && (!voter || stored.HTTPAddr != "")
		if existing == nil || string(existing.Address) != info.RaftAddr || httpMoves {
			if err := n.joinerAt(info, conf, named, hear(), !voter); err != nil {
				return res, err
			}
		}
	}
	var change func() raft.IndexFuture
	switch {
	case existing != nil && string(existing.Address) == info.RaftAddr:
		// Only the addresses in the log change.
	case existing != nil && existing.Suffrage == raft.Voter:
		// A voter moving to a raft address nobody has measured counts as
		// unhealthy until it answers there; not one whose new address is
		// its old one written another way (a --raft-advertise name of the
		// IP recorded, or the reverse), measured there already: a voter
		// restarted so while another was down was refused for lack of a
		// quorum, every second, healthy as it was.
		// Asked only when it decides something: its lookups take up to
		// a second, and a forced move checks no quorum.
		if !force {
			unmeasured := info.ID
			if sameEndpoint(string(existing.Address), info.RaftAddr) {
				unmeasured = ""
			}
			if err := n.checkQuorum("moving voter "+info.ID+" to raft address "+info.RaftAddr, voters(conf, ""), unmeasured); err != nil {
				return res, err
			}
		}
		change = func() raft.IndexFuture {
			return n.raft.AddVoter(raft.ServerID(info.ID), raft.ServerAddress(info.RaftAddr), confIndex, n.cfg.ApplyTimeout)
		}
	default:
		// A non-voter never counts towards the quorum, so adding one cannot
		// lose it; but a cluster that has none could not commit the change.
		if !force && existing == nil {
			if err := n.checkQuorum("adding "+info.ID, voters(conf, ""), ""); err != nil {
				return res, err
			}
		}
		change = func() raft.IndexFuture {
			return n.raft.AddNonvoter(raft.ServerID(info.ID), raft.ServerAddress(info.RaftAddr), confIndex, n.cfg.ApplyTimeout)
		}
	}
	if _, err := n.propose(&Command{Op: OpSetNode, Node: &info}); err != nil {
		return res, err
	}
	// Committed (never cut from the log), and past the node's entry and
	// its configuration.
	res.AdmittedIndex = n.raft.CommitIndex()
	if change != nil {
		fut := change()
		if err := fut.Error(); err != nil {
			return res, mapRaftError(err)
		}
		res.AdmittedIndex = fut.Index()
		n.log.Info("cluster membership changed", "node-id", info.ID, "raft-addr", info.RaftAddr, "http-addr", info.HTTPAddr, "suffrage", res.Suffrage)
	}
	return res, nil
}

// idInUse refuses to move member m to other addresses while it is alive at
// its own: the join then comes from another node given m's --node-id (a
// copy-pasted command, a forgotten flag defaulting to n1), and moving m
// would cut the live m off the cluster. A node that really moved stopped
// answering at the old addresses, so its join goes through once the
// leader's checks see that (it retries every second). The leader's own id
// is never free.
func (n *Node) idInUse(m raft.Server, named map[string][]byte, newRaft string) error {
	id := string(m.ID)
	var rec NodeInfo
	json.Unmarshal(named["node/"+id], &rec)
	at := "raft " + string(m.Address)
	if rec.HTTPAddr != "" {
		at += ", HTTP " + rec.HTTPAddr
	}
	if id == n.self.ID {
		return fmt.Errorf("%w: %s is this cluster's leader, at %s: give the new node another --node-id (only if %s itself now listens at raft %s, repeat with force)", ErrIDInUse, id, at, id, newRaft)
	}
	if sameEndpoint(string(m.Address), newRaft) {
		// The same socket written another way (a --raft-advertise name
		// for the IP recorded before, or the reverse): the node that
		// answers there is the joining one.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	n.measure(ctx)
	cancel()
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	h := n.peers.byID[id]
	if n.peers.term != n.term() || h == nil {
		return fmt.Errorf("%w: %s, at %s, is not measured yet; retry in a few seconds (a node that moved is let in once it no longer answers there)", ErrIDInUse, id, at)
	}
	if _, why := n.judge(h, m.ID, time.Now()); why == "" {
		return fmt.Errorf("%w: %s answers at %s and is healthy: give the new node another --node-id. Only if the joining node is %s itself, moved with its data dir to new addresses, stop it at the old ones first: it is let in once it no longer answers there", ErrIDInUse, id, at, id)
	}
	return nil
}

// sameEndpoint reports whether raft addresses a and b, written
// differently, reach the same port of the same IP: a host name in one of
// them resolves to the other's IP (or both to one IP). A node whose
// --raft-advertise is a name was recorded at the name's IP by releases
// that resolved it; restarted, it asks to be recorded at the name, and
// the member answering at the IP is itself, not a live other node.
func sameEndpoint(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || ha == hb {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	ips := func(h string) []net.IP {
		if ip := net.ParseIP(h); ip != nil {
			return []net.IP{ip}
		}
		r, _ := lookupIP(ctx, "ip", h)
		return r
	}
	for _, x := range ips(ha) {
		for _, y := range ips(hb) {
			if x.Equal(y) {
				return true
			}
		}
	}
	return false
}

// lookupIP resolves a host name for sameEndpoint (a variable for tests).
var lookupIP = net.DefaultResolver.LookupIP

// joinerAt refuses to record a node (a new one, or a member that moves)
// at addresses that are not its own: it is asked at its HTTP address, as
// health checks ask it, and must answer there with its own id and, for
// its raft address, the one the join names (or that socket written
// another way: sameEndpoint). A join pasted with --raft-addr and
// --node-http-addr swapped was taken: a running non-voter, not promoted
// yet, was moved to them, never heard from its leader again (the leader
// sent raft to its HTTP port and probed its raft port), stayed unhealthy
// and was never promoted; a node not started yet was recorded there until
// its own join. Refused when the node answers at the HTTP address as
// another node or with another raft address, when it answers at the raft
// address given (swapped), or, when it answers nowhere, when the two
// ports given are the members' HTTP and raft ports the other way round.
//
// silentOK lets through a node that does not answer: cluster join adds a
// non-voter before it starts. A voter must answer (invariant 9: no
// unreachable voter): a typo in cluster join for a stopped member would
// record a dead address, and the cluster would lack that voter until
// someone noticed; a voter that moved on its own joins from its new
// addresses, so it answers there.
func (n *Node) joinerAt(info NodeInfo, conf raft.Configuration, named map[string][]byte, heard joinerAnswer, silentOK bool) error {
	swapped := func(how string) error { return swappedAddrs(info, how) }
	force := "nothing was changed (force to record it anyway)"
	if !silentOK {
		force = "nothing was changed (force to move " + info.ID + " anyway)"
		if !heard.asked {
			return fmt.Errorf("%w: this node cannot reach its peers' HTTP API yet; retry in a few seconds", ErrNotAnswering)
		}
	}
	// An HTTP address on every interface (0.0.0.0:7070 without
	// --http-advertise, warned of at the node's start) reaches whichever
	// node runs on this machine: its answer says nothing of the joiner,
	// which only a node that may not answer yet is let through with.
	if heard.asked && (!silentOK || !unspecifiedHost(info.HTTPAddr)) {
		st, err := heard.st, heard.err
		switch {
		case err == nil && st.Self.ID != info.ID && (st.Self.ID != "" || !silentOK):
			return fmt.Errorf("%w: HTTP %s answers as node %q, not %s: check --node-http-addr; %s", ErrNotAnswering, info.HTTPAddr, st.Self.ID, info.ID, force)
		case err == nil && st.Self.RaftAddr != "" && st.Self.RaftAddr != info.RaftAddr && !sameEndpoint(st.Self.RaftAddr, info.RaftAddr):
			if st.Self.RaftAddr == info.HTTPAddr {
				return swapped(fmt.Sprintf("%s answers at HTTP %s and its raft address is %s", info.ID, info.HTTPAddr, st.Self.RaftAddr))
			}
			return fmt.Errorf("%w: %s answers at HTTP %s but its raft address is %s, not %s: check --raft-addr; %s", ErrNotAnswering, info.ID, info.HTTPAddr, st.Self.RaftAddr, info.RaftAddr, force)
		case err == nil:
			return nil
		case !silentOK:
			return fmt.Errorf("%w: voter %s does not answer at HTTP %s (%v): start it there first (its join then goes through on its own), or check --raft-addr and --node-http-addr; moving it to addresses where nothing answers would leave the cluster without that voter (force to move it anyway)", ErrNotAnswering, info.ID, info.HTTPAddr, err)
		}
		// Not when the host did not answer in time: the other port of the
		// same host would not either, and the join waited twice as long.
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, context.DeadlineExceeded) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
			defer cancel()
			if st, err := heard.probe(ctx, info.RaftAddr); err == nil && (st.Self.ID == "" || st.Self.ID == info.ID) {
				return swapped(fmt.Sprintf("%s's HTTP API answers at the address given as --raft-addr, %s", info.ID, info.RaftAddr))
			}
		}
	}
	var members []NodeInfo
	for _, s := range conf.Servers {
		var m NodeInfo
		if s.ID != raft.ServerID(info.ID) && json.Unmarshal(named["node/"+string(s.ID)], &m) == nil {
			members = append(members, NodeInfo{ID: string(s.ID), RaftAddr: string(s.Address), HTTPAddr: m.HTTPAddr})
		}
	}
	if portsSwapped(info, members) {
		_, rp, _ := net.SplitHostPort(info.RaftAddr)
		_, hp, _ := net.SplitHostPort(info.HTTPAddr)
		return swapped(fmt.Sprintf("it does not answer yet, and port %s is the members' HTTP port and %s their raft port", rp, hp))
	}
	return nil
}

// unspecifiedHost reports whether addr's host is empty or an address of
// every interface (0.0.0.0, ::).
func unspecifiedHost(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

// joinerAnswer is what a joining node answered at its HTTP address, asked
// once per join (Join): asked is false when this node cannot ask its
// peers yet (no probe set).
type joinerAnswer struct {
	st    Status
	err   error
	asked bool
	probe PeerProbe
}

// portsSwapped reports whether the ports of a join's addresses, on one
// host, are the other members' the other way round: the raft port given
// is an HTTP port of theirs and none's raft port, and the HTTP port given
// a raft port of theirs and none's HTTP port.
func portsSwapped(info NodeInfo, members []NodeInfo) bool {
	rh, rp, err1 := net.SplitHostPort(info.RaftAddr)
	hh, hp, err2 := net.SplitHostPort(info.HTTPAddr)
	if err1 != nil || err2 != nil || rh != hh || rp == hp {
		return false
	}
	httpPorts, raftPorts := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		if _, p, err := net.SplitHostPort(m.RaftAddr); err == nil {
			raftPorts[p] = true
		}
		if _, p, err := net.SplitHostPort(m.HTTPAddr); err == nil {
			httpPorts[p] = true
		}
	}
	return httpPorts[rp] && !raftPorts[rp] && raftPorts[hp] && !httpPorts[hp]
}

// swappedAddrs is the refusal of a join whose --raft-addr and
// --node-http-addr are the node's the other way round, how telling how
// that shows.
func swappedAddrs(info NodeInfo, how string) error {
	return fmt.Errorf("%w: --raft-addr %s and --node-http-addr %s of %s look swapped (%s): --raft-addr takes the node's serve --raft-addr and --node-http-addr its --http-addr, here --raft-addr %s --node-http-addr %s; nothing was changed (force to record them as given)",
		ErrNotAnswering, info.RaftAddr, info.HTTPAddr, info.ID, how, info.HTTPAddr, info.RaftAddr)
}

// notForeign refuses a new member that holds a cluster of its own: its
// configuration lists members and none of them is one of conf's (a store
// started without --join, a restored backup, a node of another cluster).
// Raft cannot tell: where the two logs' terms happen to agree it appends
// this cluster's entries after the node's own, the node's FSM skips them
// up to its own applied index, and the node, caught up by that index,
// would be promoted with the other cluster's records: one key claimed
// twice, lookups answered with another cluster's data. A node with no
// configuration (an empty data dir) or one that shares a member with this
// cluster (it was one of them) goes on; so does one that does not answer
// (it may not run yet). One that refuses this cluster's node token is
// refused too (ErrTokenRefused): it could hide a cluster of its own, and
// it could never be measured healthy and promoted. force does not skip
// this: no quorum is at stake, the records are.
func (n *Node) notForeign(info NodeInfo, conf raft.Configuration, heard joinerAnswer) error {
	if !heard.asked {
		return nil
	}
	st, err := heard.st, heard.err
	if errors.Is(err, ErrNoNodeToken) {
		return fmt.Errorf("%w: node %s answers at HTTP %s and wants a token, but this node, the leader, has no --node-token-file (%v): it can neither see whether %s holds a cluster of its own nor measure its health to promote it. "+
			"Restart the members with --node-token-file (docs/SECURITY.md); nothing is wrong with %s",
			ErrNoNodeToken, info.ID, info.HTTPAddr, err, info.ID, info.ID)
	}
	if errors.Is(err, ErrTokenRefused) {
		return fmt.Errorf("%w: node %s answers at HTTP %s but refuses this cluster's node token (%v): it runs with another --auth-file, as a node of another cluster does. "+
			"A node of this cluster needs the entry of the token in --node-token-file in its --auth-file; a node of another cluster must start on an empty data dir (keep the old one: it holds that cluster's records)",
			ErrTokenRefused, info.ID, info.HTTPAddr, err)
	}
	if err != nil {
		return nil
	}
	if len(st.Nodes) == 0 {
		return nil
	}
	ours := map[raft.ServerID]raft.ServerAddress{}
	for _, s := range conf.Servers {
		ours[s.ID] = s.Address
	}
	var theirs []string
	for _, m := range st.Nodes {
		if a, ok := ours[raft.ServerID(m.ID)]; ok && string(a) == m.RaftAddr {
			return nil
		}
		theirs = append(theirs, m.ID+" ("+m.RaftAddr+")")
	}
	sort.Strings(theirs)
	return fmt.Errorf("%w: node %s at HTTP %s is a member of another cluster, with its own state (members %s, applied index %d): taken in, its records would mix with this cluster's and a key could be claimed twice. "+
		"To make it a member here, stop it, move its data dir aside (it holds that cluster's only copy of its records) and start it on an empty data dir with --join; check --node-http-addr if it is not the node you meant",
		ErrForeignCluster, info.ID, info.HTTPAddr, strings.Join(theirs, ", "), st.AppliedIndex)
}

// server is the member id of conf, or ErrUnknownMember naming the members.
func server(conf raft.Configuration, id string) (*raft.Server, error) {
	var members []string
	for i, s := range conf.Servers {
		if string(s.ID) == id {
			return &conf.Servers[i], nil
		}
		members = append(members, string(s.ID))
	}
	sort.Strings(members)
	return nil, fmt.Errorf("%w: %s is not in the cluster (members: %s)", ErrUnknownMember, id, strings.Join(members, ", "))
}

// Remove removes a node from the cluster. Unless force, removing a voter is
// refused (QuorumError) when fewer than a quorum of the remaining voters
// would be healthy; removing the last voter is always refused. A forced
// removal that cannot commit returns a PendingError.
func (n *Node) Remove(id string, force bool) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	n.confChange.Lock()
	defer n.confChange.Unlock()
	if n.raft.State() != raft.Leader {
		return n.notLeader() // deposed while it waited for the lock (stillLeading)
	}
	conf, confIndex, err := n.latestConfiguration()
	if err != nil {
		return n.stillLeading(err)
	}
	target, err := server(conf, id)
	if err != nil {
		return err
	}
	change := "removing " + id
	if target.Suffrage == raft.Voter {
		after := voters(conf, id)
		if len(after) == 0 {
			return &QuorumError{Change: change, LastVoter: true}
		}
		if !force {
			if err := n.checkQuorum(change, after, ""); err != nil {
				return err
			}
		}
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), confIndex, n.cfg.ApplyTimeout).Error(); err != nil {
		// Leadership lost after the change was appended: it is in this
		// node's log and commits when the remaining voters can.
		if force && errors.Is(err, raft.ErrLeadershipLost) {
			return &PendingError{Change: change}
		}
		return mapRaftError(err)
	}
	n.log.Info("removed a node from the cluster", "node-id", id, "forced", force)
	if h := removedHook.Load(); h != nil {
		(*h)(n)
	}
	_, err = n.propose(&Command{Op: OpRemoveNode, Node: &NodeInfo{ID: id}})
	if err != nil && id == n.self.ID {
		// A leader that removed itself has stepped down and can propose
		// nothing more: the removal is committed, and the address record
		// left behind belongs to no member (a later join of the same id
		// overwrites it).
		n.log.Info("removed this node, the leader, from the cluster; it keeps running outside it until an operator adds it back", "node-id", id)
		return nil
	}
	if err != nil {
		// The removal is committed all the same: only its address record
		// is left, which belongs to no member (as above). Returned, the
		// error had the API forward the removal to the new leader, which
		// answered 404 "no such member" for a node just removed (an
		// attack moving the leadership every half second).
		n.log.Warn("removed a node from the cluster; its address record was left (the leadership changed): it belongs to no member, and a later join of the same id overwrites it", "node-id", id, "error", err)
	}
	return nil
}

// stillLeading is err, a failure of latestConfiguration in a join or a
// removal, unless this node no longer leads: then the not-leader answer,
// which the API forwards to the new leader. A change checks the
// leadership before it waits for confChange (a promotion holds it while
// its change commits) and again once it holds it, but the leadership can
// move while it reads the configuration: the new leader cuts the deposed
// node's log or installs a snapshot in it, and configIndex, reading the
// log under it, failed ("read raft log entry N for the configuration"),
// answered 500 internal error.
func (n *Node) stillLeading(err error) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	return err
}

// removedHook, when set (tests only), runs in Remove once the removal is
// committed, before its address record is removed.
var removedHook atomic.Pointer[func(*Node)]

// voters lists the voters of conf but the one with id except.
func voters(conf raft.Configuration, except string) []raft.Server {
	var out []raft.Server
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != except {
			out = append(out, s)
		}
	}
	return out
}

// checkQuorum returns a QuorumError unless a quorum of after (the voters
// once the change is made) is measured healthy now. unmeasured names a
// voter that counts as unhealthy whatever its measurement.
func (n *Node) checkQuorum(change string, after []raft.Server, unmeasured string) error {
	// A decision needs measurements from this term and this moment.
	ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	n.measure(ctx)
	cancel()
	e := &QuorumError{Change: change, Unhealthy: map[string]string{}}
	now := time.Now()
	n.peers.mu.Lock()
	fresh := n.peers.term == n.term()
	if !fresh || !n.IsLeader() {
		// The leadership moved on since the change found this node
		// leading (it waited for confChange, which a promotion holds
		// while its change commits): a follower measures nothing, and
		// every other voter read "not measured yet", a 409 refusal of a
		// healthy cluster's change. The new leader decides it.
		n.peers.mu.Unlock()
		return n.leadershipMoved("the quorum of healthy voters")
	}
	for _, s := range after {
		id := string(s.ID)
		e.Voters = append(e.Voters, id)
		why := ""
		switch h := n.peers.byID[id]; {
		case id == unmeasured:
			why = "not yet measured at its new address"
		case id == n.self.ID:
		case !fresh || h == nil:
			why = "not measured yet"
		default:
			_, why = n.judge(h, s.ID, now)
		}
		if why == "" {
			e.Healthy = append(e.Healthy, id)
		} else {
			e.Unhealthy[id] = why
		}
	}
	n.peers.mu.Unlock()
	sort.Strings(e.Voters)
	sort.Strings(e.Healthy)
	if len(e.Healthy) >= len(after)/2+1 {
		return nil
	}
	return e
}

// ErrCantBootstrap means the node has raft state already (a term a peer
// sent it, or a log): a peer that bootstrapped first is bringing it in, or,
// when it lasts, the node's raft log is missing.
var ErrCantBootstrap = errors.New("raftfsm: cannot bootstrap: this node has raft state already")

// Bootstrap forms a new cluster of peers (this node among them). Every
// peer may call it with the same list: raft accepts identical bootstrap
// configurations. A node that already has raft state gets
// ErrCantBootstrap and is unchanged.
func (n *Node) Bootstrap(peers []NodeInfo) error {
	conf := raft.Configuration{}
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	err := n.raft.BootstrapCluster(conf).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return ErrCantBootstrap
	}
	if err != nil {
		return fmt.Errorf("raftfsm: bootstrap: %w", err)
	}
	// A new cluster's first configuration: no past of another's to
	// replay, so no joining file (joining.go).
	if n.joining.Load() {
		if err := removeJoining(n.cfg.DataDir); err != nil {
			n.log.Warn("could not remove the joining marker", "error", err)
		} else {
			n.joining.Store(false)
		}
	}
	n.refreshMembership()
	return nil
}

func (n *Node) refreshMembership() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	if !n.committed.holds(f.Configuration()) { // the scan only when it may have changed
		n.committed.see(f.Configuration(), n.configPending())
	}
	in := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.self.ID {
			in = true
		}
	}
	n.member.Store(in)
	n.watchLeader(f.Configuration(), in)
	n.saveMark()                       // votehold.go
	n.forgetJoining(f.Configuration()) // joining.go
	n.releaseVote()                    // votehold.go
	n.liftCampaignHold()               // votehold.go
}

// noLeaderAfter is how long a member goes without a leader before it says
// so (watchLeader); noLeaderRemind, how often it says it again.
var (
	noLeaderAfter  = time.Minute
	noLeaderRemind = 5 * time.Minute
)

// watchLeader says, once a member has had no leader for noLeaderAfter,
// what that means and what to do. Raft's own lines are its elections' (a
// vote request that failed, an election timeout) whatever the cause: a
// node left out of an idem recover logged nothing else, for as long as it
// ran (an operator walk).
func (n *Node) watchLeader(conf raft.Configuration, member bool) {
	if _, id := n.raft.LeaderWithID(); id != "" || !member {
		n.leaderlessSince = time.Time{}
		return
	}
	if n.leaderlessSince.IsZero() {
		n.leaderlessSince = time.Now()
		return
	}
	since := time.Since(n.leaderlessSince)
	if since < noLeaderAfter || !n.leaderlessLog.Allow(noLeaderRemind) {
		return
	}
	if since >= time.Second {
		since = since.Round(time.Second)
	} else {
		since = since.Round(time.Millisecond)
	}
	if n.logStore.sealed.Load() || n.disk.full.Load() {
		// Its own disk is the likelier cause, and the lines about it say
		// what to do; moving the data dir aside would be wrong advice.
		n.log.Warn(fmt.Sprintf("no leader for %s: this node's disk is short of space (see the lines about the disk above): a node that cannot store raft entries cannot lead, and a one-node cluster takes no writes until space is freed (docs/DISK.md)",
			since), "node-id", n.self.ID, "raft-state", n.raft.State().String())
		return
	}
	var voters []string
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, fmt.Sprintf("%s at %s", s.ID, s.Address))
		}
	}
	quorum := len(voters)/2 + 1
	n.log.Warn(fmt.Sprintf("no leader for %s: this node has heard from no leader, and none can be elected without %d of the %d voters of its configuration (%s). It takes no writes meanwhile. "+
		"Either fewer than %d of them are running and reachable at those raft addresses (start them; check the network and firewalls), "+
		"or the other members went on without this node (an idem recover that left it out, or a removal while it was away): then idem cluster status through one of them does not list it, "+
		"and this node must not come back with its old data: stop it, move its data dir aside (do not delete it) and start it with an empty one and --join one of them (docs/BACKUP.md, docs/MEMBERSHIP.md)",
		since, quorum, len(voters), strings.Join(voters, ", "), quorum),
		"node-id", n.self.ID, "raft-state", n.raft.State().String())
}

func (n *Node) watchMembership() {
	defer n.wg.Done()
	// The health loop is started here rather than in Open: it belongs to
	// membership. The counter is positive (this goroutine holds it), so
	// adding to it is safe even while Close waits.
	n.wg.Add(1)
	go n.healthLoop()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			n.saveMark() // a mark learned since the last refresh, for the next start
			return
		case <-t.C:
			n.refreshMembership()
		}
	}
}

// observe keeps, for the leader, which peers raft's heartbeats fail to
// reach, and when they last failed: a peer that answers HTTP but not raft
// is not healthy either. Raft reports a resumed heartbeat only from the
// replication that failed, so a failure of a peer's removed replication
// (stopped, removed, then joined again under the same id) is never
// resumed: judge clears it once the peer has heard from the leader since.
func (n *Node) observe(ch chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case o := <-ch:
			n.mu.Lock()
			switch v := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				n.unhealty[v.PeerID] = time.Now()
			case raft.ResumedHeartbeatObservation:
				delete(n.unhealty, v.PeerID)
			case raft.LeaderObservation:
				clear(n.unhealty)
			}
			n.mu.Unlock()
		}
	}
}

// peerState is what this node, while it leads, has measured of the other
// members.
type peerState struct {
	mu      sync.Mutex
	probe   PeerProbe
	term    uint64 // the term byID and commits were measured in
	byID    map[string]*peerHealth
	commits []commitSample // this leader's commit index, one per round, oldest first
	// shared are the features every other member listed at the end of a
	// round of this term: the gates they open (membersHave) were open, so
	// entries needing them may be in the log. A member losing one of the
	// others was downgraded harmlessly: nothing it skips was written.
	shared []string

	round sync.Mutex // one measuring round at a time
}

type commitSample struct {
	at    time.Time
	index uint64
	// gated is the leader's state's record of gated entries applied
	// (engine.Meta.Gated), read before index: a node that applied index
	// holds every kind it records.
	gated uint64
}

// peerHealth is the leader's measurement of one peer.
type peerHealth struct {
	firstAt    time.Time // first attempt this term
	checkedAt  time.Time // last attempt
	answeredAt time.Time // last answer (zero: never)
	contactAt  time.Time // when the peer last heard from the leader, by this node's clock (zero: never)
	applied    uint64    // raft's applied index, at answeredAt: what every decision goes by
	// stateApplied is its state store's applied index (Status.StateAppliedIndex),
	// at answeredAt: for what status shows only (nil: not said).
	stateApplied *uint64
	lag          uint64 // the leader's commit index minus applied, at answeredAt
	caughtUp     bool   // applied, at answeredAt, what was committed one round earlier
	// caughtUpGated is the leader's record of gated entries applied (engine.Meta.Gated)
	// as of that index: what a caught-up node's state must record too.
	caughtUpGated uint64
	err           string // why the last attempt failed ("" when it answered)
	// tokenRefused: the last attempt was refused for this node's token
	// (ErrTokenRefused): the peer's --auth-file lacks the nodes' entry.
	tokenRefused bool
	goodSince    time.Time // start of the current streak of healthy, caught-up answers
	features     []string  // what its Apply knows, at answeredAt
	keys         []NodeKey // its encryption keys, at answeredAt
	scope        string    // its scope mode, at answeredAt ("" from a release that does not say)
	retention    string    // its --retention, at answeredAt ("" from a release that does not say)
	auth         string    // Status.Auth, at answeredAt ("" from a release that does not say)
	// its TLS certificate's and CA's expiry, at answeredAt (nil: no TLS)
	certNotAfter, caNotAfter *Stamp
	// its wall clock minus this node's, at answeredAt, and to within what
	clockOffsetMs, clockUncertaintyMs *int64
	version                           string    // its release, at answeredAt
	gated                             *uint64   // its state's Status.Gated, at answeredAt (nil: not said)
	diskFull                          *DiskFull // its Status.DiskFull, at answeredAt
	refused                           string    // the reason its promotion was last refused, logged once
	downgraded                        string    // Member.Downgraded
	// denied: the last attempt was refused for want of this node's token,
	// a wrong one (tokenRefused) or none to send (ErrNoNodeToken): the
	// peer runs, but this node cannot read what it runs with.
	denied bool
}

func (h *peerHealth) fill(m *Member, now time.Time) {
	m.CheckedAt, m.CheckedMsAgo = stamp(h.checkedAt), ptr(now.Sub(h.checkedAt).Milliseconds())
	if !h.contactAt.IsZero() {
		m.LastContactMs = ptr(now.Sub(h.contactAt).Milliseconds())
	}
	if !h.answeredAt.IsZero() {
		m.AppliedIndex, m.StateAppliedIndex = ptr(h.applied), h.stateApplied
		if h.err == "" {
			// A node that did not answer the last check is behind by
			// whatever was committed since its last answer: its lag then
			// (0 for a node stopped caught up) read as "caught up".
			m.Lag = ptr(h.lag)
		}
		if slices.Contains(h.features, FeatureKeyCheck) {
			m.Keys = ownKeys(h.keys)
		}
		m.CertNotAfter, m.CANotAfter = h.certNotAfter, h.caNotAfter
		m.ClockOffsetMs, m.ClockUncertaintyMs = h.clockOffsetMs, h.clockUncertaintyMs
		m.Version = h.version
	}
	m.Downgraded = h.downgraded
}

// errNoHTTPAddr is why a member whose HTTP address the state does not
// record yet is not asked for its status.
var errNoHTTPAddr = errors.New("its HTTP address is not in the log")

// judge says whether the measured peer is healthy now, and why not. The
// caller holds n.peers.mu.
func (n *Node) judge(h *peerHealth, id raft.ServerID, now time.Time) (bool, string) {
	n.mu.Lock()
	failedAt, hbFailing := n.unhealty[id]
	if hbFailing && h.contactAt.After(failedAt) {
		// The peer heard from this leader after the last failed
		// heartbeat: raft reaches it (see observe).
		delete(n.unhealty, id)
		hbFailing = false
	}
	n.mu.Unlock()
	switch {
	case h.answeredAt.IsZero() && h.err == errNoHTTPAddr.Error() && now.Sub(h.firstAt) < silentAfter:
		// Right after a cluster forms (or a node joins) the members'
		// HTTP addresses reach the log a moment after their raft ones:
		// not measured yet, which cluster status tells from a lost quorum
		// (it warned "writes fail" at a cluster just formed).
		return false, NotMeasuredYet + " (" + errNoHTTPAddr.Error() + " yet)"
	case h.answeredAt.IsZero():
		return false, "has never answered this leader: " + h.err
	case h.err != "":
		// One missed check is enough: a decision must not count a node
		// that stopped a moment ago, and a healthy node answers within
		// probeTimeout.
		return false, fmt.Sprintf(DidNotAnswer+" (last answer %s ago): %s", now.Sub(h.answeredAt).Round(100*time.Millisecond), h.err)
	case now.Sub(h.answeredAt) > silentAfter:
		return false, fmt.Sprintf("not checked for %s", now.Sub(h.answeredAt).Round(100*time.Millisecond))
	case h.contactAt.IsZero():
		return false, "answers, but has never heard from this leader"
	case now.Sub(h.contactAt) > silentAfter:
		return false, fmt.Sprintf("answers, but has not heard from the leader for %s", now.Sub(h.contactAt).Round(100*time.Millisecond))
	case hbFailing:
		return false, "answers, but the leader's raft heartbeats to it fail"
	}
	// A leader that has led for less than behindWindow has no sample that
	// old: it judges by a shorter window once it can. Without that, a node
	// restarted a moment ago, answering with the applied index it had
	// before replaying its log, counted towards a quorum in a young cluster.
	window := behindWindow
	c, ok := n.peers.commitBefore(h.answeredAt.Add(-window))
	if !ok {
		window = youngWindow
		c, ok = n.peers.commitBefore(h.answeredAt.Add(-window))
	}
	if ok && h.applied < c {
		why := fmt.Sprintf("falling behind: had applied %d when the leader had committed %d %s earlier", h.applied, c, window)
		if h.stateApplied != nil && *h.stateApplied >= c && h.diskFull == nil {
			// Restarted a moment ago: its state holds what it applied
			// before the stop (its /readyz says ready), but raft has not
			// replayed its log yet. Still not healthy: until raft has, it
			// counts towards no quorum of a removal, no transfer and no
			// promotion (TestYoungLeaderJudgesAReplayingNodeBehind). The
			// bare "had applied 0" read as a node that had lost its data.
			why = fmt.Sprintf("replaying its log after a restart: raft had applied %d when the leader had committed %d %s earlier, though its state already holds index %d (its /readyz may answer 200). "+
				"It counts as healthy for membership changes and leadership transfers once raft has replayed, usually by the next check", h.applied, c, window, *h.stateApplied)
		}
		if h.diskFull != nil {
			// A full follower takes no entries: the lag alone sent an
			// operator to the node's log to find out why.
			why += ": " + h.diskFull.String()
		} else if r := n.disk.expandRefused(); r != "" {
			why += ": " + r
		}
		return false, why
	}
	return true, ""
}

// commitBefore is the newest commit index sampled at or before t.
func (p *peerState) commitBefore(t time.Time) (uint64, bool) {
	for i := len(p.commits) - 1; i >= 0; i-- {
		if !p.commits[i].at.After(t) {
			return p.commits[i].index, true
		}
	}
	return 0, false
}

// healthLoop measures the members and promotes caught-up non-voters, while
// this node leads.
func (n *Node) healthLoop() {
	defer n.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-n.stop; cancel() }()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			if !n.IsLeader() {
				n.askWhetherKept(ctx)
				continue
			}
			n.kept.clear(n) // a leader is a voter
			n.measure(ctx)
			n.noteVoterRoom()
			n.dropSentSnapshot()
			n.noteVoterRetention()
			n.promote()
			n.keyHandOff()
			n.recordKeyChecks()
		}
	}
}

// dropSentSnapshot removes the stream last written out for a follower
// (snapshotStore.sent) once every other member has answered this round
// with an applied index at or past its index.
func (n *Node) dropSentSnapshot() {
	if n.snaps == nil {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	least := uint64(math.MaxUint64)
	n.peers.mu.Lock()
	for _, m := range f.Configuration().Servers {
		if string(m.ID) == n.self.ID {
			continue
		}
		h := n.peers.byID[string(m.ID)]
		if h == nil || h.err != "" || h.answeredAt.IsZero() {
			n.peers.mu.Unlock()
			return // not known to have it: kept until spareKeep
		}
		least = min(least, h.applied)
	}
	n.peers.mu.Unlock()
	n.snaps.dropSpareApplied(least)
}

// peerAnswer is one member's answer to askOthers.
type peerAnswer struct {
	id  string
	st  Status
	err error
	at  time.Time
	// sentWallMs and atWallMs are this node's wall clock when the
	// question went and when the answer came, for the peer's clock offset.
	sentWallMs, atWallMs int64
}

// askOthers asks every member of cf but this node for its status, in
// parallel, at the HTTP address the log records for it, within
// probeTimeout. A member that cannot be asked, or answers as another
// node, has an error.
func (n *Node) askOthers(ctx context.Context, cf raft.Configuration, probe PeerProbe) []peerAnswer {
	named, _ := n.db.Named("node/")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []peerAnswer
	)
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for _, s := range cf.Servers {
		id := string(s.ID)
		if id == n.self.ID {
			continue
		}
		var info NodeInfo
		json.Unmarshal(named["node/"+id], &info)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := peerAnswer{id: id, sentWallMs: n.clock.WallMs()}
			switch {
			case probe == nil:
				r.err = errors.New("this node cannot reach its peers' HTTP API yet")
			case info.HTTPAddr == "":
				r.err = errNoHTTPAddr
			default:
				r.st, r.err = probe(pctx, info.HTTPAddr)
				if r.err == nil && r.st.Self.ID != id {
					r.err = fmt.Errorf("%s answered as node %q", info.HTTPAddr, r.st.Self.ID)
				}
			}
			r.at, r.atWallMs = time.Now(), n.clock.WallMs()
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return results
}

// measure asks every other member for its status, in parallel, and
// records what it learned.
func (n *Node) measure(ctx context.Context) {
	n.peers.round.Lock()
	defer n.peers.round.Unlock()
	if !n.IsLeader() {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	term := n.term()
	// Read before the commit index: the state it is read from applied no
	// more than that index, so a node that applied it records every kind.
	gated := n.db.Meta().Gated
	commit := n.raft.CommitIndex()
	start := time.Now()

	n.peers.mu.Lock()
	if n.peers.term != term || n.peers.byID == nil {
		n.peers.term, n.peers.byID, n.peers.commits, n.peers.shared = term, map[string]*peerHealth{}, nil, nil
	}
	prevCommit, prevGated, hasPrev := uint64(0), uint64(0), len(n.peers.commits) > 0
	if hasPrev {
		last := n.peers.commits[len(n.peers.commits)-1]
		prevCommit, prevGated = last.index, last.gated
	}
	n.peers.commits = append(n.peers.commits, commitSample{at: start, index: commit, gated: gated})
	// Keep a little more than the window the judgement looks back on.
	for len(n.peers.commits) > 2 && start.Sub(n.peers.commits[1].at) > behindWindow+2*probeEvery {
		n.peers.commits = n.peers.commits[1:]
	}
	probe := n.peers.probe
	n.peers.mu.Unlock()

	results := n.askOthers(ctx, f.Configuration(), probe)

	voters := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		voters[string(s.ID)] = s.Suffrage == raft.Voter
	}
	used := n.usedFeatures()

	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	if n.peers.term != term {
		return
	}
	for id := range n.peers.byID {
		if _, member := voters[id]; !member {
			// Removed: a node joined again under its id is another
			// state (a member downgraded in place, rebuilt as its
			// mark says, answered first with its install done, and
			// stayed marked for the rest of the term).
			delete(n.peers.byID, id)
		}
	}
	for _, r := range results {
		h := n.peers.byID[r.id]
		if h == nil {
			h = &peerHealth{firstAt: r.at}
			n.peers.byID[r.id] = h
		}
		h.checkedAt = r.at
		if r.err != nil {
			h.err, h.goodSince = r.err.Error(), time.Time{}
			h.tokenRefused = errors.Is(r.err, ErrTokenRefused) && !errors.Is(r.err, ErrNoNodeToken)
			h.denied = errors.Is(r.err, ErrTokenRefused)
			continue
		}
		n.noteDowngrade(r.id, h, r.st, voters[r.id], used)
		h.err, h.answeredAt, h.tokenRefused, h.denied = "", r.at, false, false
		h.applied, h.lag, h.stateApplied = r.st.AppliedIndex, sub(commit, r.st.AppliedIndex), r.st.StateAppliedIndex
		h.features, h.keys, h.scope, h.retention, h.auth = r.st.Features, r.st.Keys, r.st.Scope, r.st.RetentionFlag, r.st.Auth
		h.certNotAfter, h.caNotAfter = r.st.CertNotAfter, r.st.CANotAfter
		h.clockOffsetMs, h.clockUncertaintyMs, h.version, h.gated = nil, nil, r.st.Version, r.st.Gated
		h.diskFull = r.st.DiskFull
		if r.st.WallMs != 0 {
			// The answer's wall clock was read between the question and
			// the answer: against their midpoint, to within half the trip.
			h.clockOffsetMs = ptr(r.st.WallMs - (r.sentWallMs+r.atWallMs)/2)
			h.clockUncertaintyMs = ptr(max(r.atWallMs-r.sentWallMs, 0)/2 + 1)
		}
		h.caughtUp = hasPrev && r.st.AppliedIndex >= prevCommit
		h.caughtUpGated = prevGated
		// Its last contact from a leader counts only when it follows this one.
		if r.st.LastLeaderContactMs != nil && r.st.Leader != nil && r.st.Leader.ID == n.self.ID {
			h.contactAt = r.at.Add(-time.Duration(*r.st.LastLeaderContactMs) * time.Millisecond)
		}
		if ok, _ := n.judge(h, raft.ServerID(r.id), r.at); ok && h.caughtUp {
			if h.goodSince.IsZero() {
				h.goodSince = r.at
			}
		} else {
			h.goodSince = time.Time{}
		}
	}
	for _, feature := range features {
		if !slices.Contains(n.peers.shared, feature) && n.othersList(f.Configuration(), feature, term) {
			n.peers.shared = append(n.peers.shared, feature)
		}
	}
}

// noteDowngrade says when a peer's answer st shows it was started again
// on an earlier release on its data dir (a downgrade in place): that
// release skips the entries that need what it lacks, so its state may now
// lack writes every other replica holds, and it may lead with it. Said at
// ERROR once per term, and shown in the member's status until it answers
// with an applied index of 0 (rebuilt). Two ways tell it:
//
//   - a feature its previous answer this term (h, not yet updated) listed
//     and every other member listed (the gate it opens was open);
//   - for a voter, a feature the replicated state shows in use (used:
//     usedFeatures), whatever it answered before and whoever led then: a
//     leader elected after its stop, or after its start, sees it too.
//
// Both hold back in the rollback OPERATIONS.md calls safe: while a member
// runs the earlier release the gates stay shut, so no such entry is
// written and the state records none. The caller holds n.peers.mu.
//
// A lower applied index alone says nothing: a node started again on its
// data dir answers with its newest snapshot's index (raft applies nothing
// more until a leader tells it the commit index), below what it answered
// before its stop, and that is the answer a downgrade in place gives
// first. Only an empty state (an empty data dir and --join, before the
// leader's snapshot reaches it) has applied nothing. A node restarted
// before it took any snapshot answers 0 too, and is taken as rebuilt.
func (n *Node) noteDowngrade(id string, h *peerHealth, st Status, voter bool, used []string) {
	if st.AppliedIndex == 0 {
		// A state rebuilt (an empty data dir and --join), or another
		// node under this id: nothing to compare with.
		if h.downgraded != "" {
			n.log.Info("a member shown as downgraded in place answers with a state rebuilt since", "node", id, "applied-index", st.AppliedIndex, "version", st.Version)
			h.downgraded = ""
		}
		return
	}
	if h.downgraded != "" {
		return
	}
	var lost []string
	if !h.answeredAt.IsZero() {
		for _, f := range h.features {
			// A feature some member never listed this term kept its
			// entries out of the log (membersHave): rolling back while a
			// member still runs the earlier release skips nothing.
			if !slices.Contains(st.Features, f) && slices.Contains(n.peers.shared, f) {
				lost = append(lost, f)
			}
		}
	}
	var unused []string // in use by the state, and lacking
	if voter {
		for _, f := range used {
			if !slices.Contains(st.Features, f) && !slices.Contains(lost, f) {
				unused = append(unused, f)
			}
		}
	}
	if len(lost) == 0 && len(unused) == 0 {
		return
	}
	var why []string
	if len(lost) > 0 {
		why = append(why, fmt.Sprintf("%s, which its release before (%s) knew", strings.Join(lost, ","), orUnknown(h.version)))
	}
	if len(unused) > 0 {
		why = append(why, fmt.Sprintf("%s, which this cluster's state shows in use (entries needing it were written)", strings.Join(unused, ",")))
	}
	how, before := "an earlier release started on its data dir (a downgrade in place)", orUnknown(h.version)
	if len(lost) == 0 {
		// Told by the state alone: this leader never saw it otherwise.
		how = "an earlier release, started on its data dir (a downgrade in place) or a voter since before this cluster first used it"
		if h.answeredAt.IsZero() {
			before = "not seen by this leader"
		}
	}
	h.downgraded = fmt.Sprintf("since %s it runs a release (%s) whose Apply lacks %s: "+
		"%s, which skips the log entries that need it, so its state may lack writes the other members hold. "+
		"Stop it, move its data dir aside, and start it on the release the other members run with an empty data dir and --join",
		time.Now().UTC().Format(time.RFC3339), orUnknown(st.Version), strings.Join(why, "; and "), how)
	n.log.Error("a member was started again on an earlier release (a downgrade in place): its state may lack writes the others hold, and it may lead with it; rebuild it on the release the others run (empty data dir and --join)",
		"node", id, "features-lost", strings.Join(append(lost, unused...), ","), "version-before", before, "version-now", orUnknown(st.Version))
}

func orUnknown(v string) string {
	if v == "" {
		return "version not said"
	}
	return v
}

// scopeMode is the cluster's scope mode once the first write pinned it,
// else this node's --scope (Config.Scope), which that write pins when this
// node leads it; "" when neither is known.
func (n *Node) scopeMode() string {
	if mode, pinned := n.ScopeMode(); pinned {
		return mode
	}
	return n.cfg.Scope
}

// rebuildOnRelease is what a node whose state lacks gated entries does to
// be promoted: its data dir keeps the entries it skipped as applied.
const rebuildOnRelease = "stop it, move its data dir aside, and start it on the release the others run with an empty data dir and --join (upgraded on its data dir it would still lack them), and it is promoted once caught up"

// notPromotable says why a node that answered with h must stay a
// non-voter whatever its health, or "". Once the cluster's retention is
// pinned, a voter of an earlier release could lead and give claims its
// own --retention, and would skip changes of the cluster's. Once the state
// records a claim carrying its credential's cap (engine.Meta.Gated), a
// node of a release without the cap skipped it: its state lacks the
// record. Before that it is promoted as any node (an upgrade adds such
// nodes; the leader keeps caps out of the log while they are members).
// The caller holds n.peers.mu.
func (n *Node) notPromotable(h *peerHealth) string {
	if h.answeredAt.IsZero() {
		return ""
	}
	if n.db.Meta().RetentionMs != 0 && !slices.Contains(h.features, FeatureRetention) {
		return "it runs a release that does not hold the cluster's retention (its status lists no " + FeatureRetention + "): upgrade it, and it is promoted once caught up"
	}
	if n.db.Meta().Gated&gatedCredentialCap != 0 && !slices.Contains(h.features, FeatureCredentialCap) {
		// It replayed the log and skipped every claim that carried its
		// credential's cap: its state lacks those records, and leading
		// it would claim their keys again.
		return "it runs a release that does not apply claims carrying their credential's max_principals, which this cluster has written (its status lists no " + FeatureCredentialCap + "), so its state may lack the records they made: " + rebuildOnRelease
	}
	if h.caughtUpGated&gatedCredentialCap != 0 && h.caughtUp && h.gated != nil && *h.gated&gatedCredentialCap == 0 {
		// It lists the feature now, but its state, caught up, records
		// no capped claim applied: it replayed them on an earlier
		// release, which skipped them, and was upgraded on its data dir,
		// where they are not applied again. Leading, it would claim their
		// keys again. Compared with the leader's state as of the index
		// the node is known to have applied: the cluster's first capped
		// claim, written since, is not in its answer, and named a node
		// whose state holds every record (it was then kept back).
		return "its state, caught up, records no claim carrying its credential's max_principals though this cluster has written them: it replayed them on a release that skips them and was upgraded on its data dir, which does not apply them again, so its state lacks their records: " + rebuildOnRelease
	}
	if len(n.fsm.keys.recordedChecks()) > 0 && !slices.Contains(h.features, FeatureKeyCheck) {
		// It skipped the recorded check values (OpKeyCheck): as a voter
		// it is reported downgraded in place (usedFeatures), and leading
		// it would check no key against them. lacksKeys let it in when
		// no key was needed any more.
		return "it runs a release that does not record encryption keys' check values, which this cluster has recorded (its status lists no " + FeatureKeyCheck + "), so its state lacks them: upgrade it, and it is promoted once caught up"
	}
	if want := n.scopeMode(); want != "" && h.scope != "" && h.scope != want {
		// Admitted by an idem cluster join by hand before it answered
		// (the join's scope check then has nothing to ask), and started
		// with another --scope: its own join is refused, but caught up it
		// was promoted, and leading the cluster's first write it pinned
		// its mode for every node (the same key claimed twice).
		return fmt.Sprintf("it runs with --scope %s and this cluster's scope is %s (a voter leading the first write would fix its mode for every node, and the same key would be claimed twice): start it with --scope %s on an empty data dir, and it is promoted once caught up", h.scope, want, want)
	}
	if n.cfg.ChecksTokens && h.auth == AuthNone {
		// Admitted by an idem cluster join by hand before it answered
		// (the join's auth check then has nothing to ask), and started
		// without --auth-file: its own join is refused (auth_mismatch),
		// but caught up it was promoted, and it answered every route,
		// and a consistency=stale lookup from its own replica, to
		// callers without a token. Kept back, it answers no stale read.
		return "it runs without --auth-file while this cluster's nodes check tokens: it would answer every route, and every tenant's records from its own replica, to callers without a token; start it with the --auth-file the other nodes use, and it is promoted once caught up"
	}
	if why := n.otherRetention(h); why != "" {
		return why
	}
	return n.lacksKeys(h)
}

// AuthTokens and AuthNone are Status.Auth's values.
const (
	AuthTokens = "tokens"
	AuthNone   = "none"
)

// AuthMode is Status.Auth for a node that checks tokens or not.
func AuthMode(checks bool) string {
	if checks {
		return AuthTokens
	}
	return AuthNone
}

// otherRetention says why a node started with another --retention than
// this leader's must stay a non-voter, or "". Until the first claim pins
// the cluster's retention (or set-retention does), a claim gets the
// --retention of the leader that decides it: the node, joined later with
// another flag than the nodes that formed the cluster (whose flags were
// compared then), could win an election and give the first claim, and so
// the cluster, its own. Once the retention is pinned every leader gives
// the pinned one and the flags no longer matter (a rolling change of
// --retention after set-retention goes on). A node that does not say (an
// earlier release) is not held back for it. The caller holds n.peers.mu.
func (n *Node) otherRetention(h *peerHealth) string {
	if n.cfg.Retention <= 0 || h.retention == "" || n.db.Meta().RetentionMs != 0 {
		return ""
	}
	if d, err := time.ParseDuration(h.retention); err == nil && d == n.cfg.Retention {
		return ""
	}
	return fmt.Sprintf("it runs with --retention %s and this leader with --retention %s, and no claim has pinned the cluster's retention yet (a voter leading the first claim would pin its own for every node): start it with --retention %s, or pin the cluster's first (idem cluster set-retention), and it is promoted once caught up", h.retention, n.cfg.Retention, n.cfg.Retention)
}

// lacksKeys says why a node must not become a voter of a cluster whose
// stored values are encrypted, or "": leading, a node without a key in use
// would store plaintext or values the others cannot read, and a node whose
// key under a recorded id differs would seal values nobody else can read.
// The caller holds n.peers.mu.
func (n *Node) lacksKeys(h *peerHealth) string {
	needed := n.neededKeysLocked()
	checks := n.fsm.keys.recordedChecks()
	kr := n.Keyring()
	if len(needed) == 0 && len(checks) == 0 && kr == nil {
		return ""
	}
	if !slices.Contains(h.features, FeatureKeyCheck) {
		if len(needed) == 0 {
			return ""
		}
		return "it runs a release that does not report its encryption keys (its status lists no " + FeatureKeyCheck + "), and the cluster's stored values are encrypted: upgrade it, and it is promoted once caught up"
	}
	have := map[string]string{}
	for _, k := range h.keys {
		have[k.ID] = k.Check
	}
	for _, id := range needed {
		if _, ok := have[id]; !ok {
			// Say why the key is needed as it is: "the cluster encrypts
			// with k1" read as the key to put first, for a k1 that after
			// a rotation only decrypts.
			why := fmt.Sprintf("stored values are encrypted with key %q", id)
			if !slices.Contains(n.fsm.keys.inUse(), id) {
				why = fmt.Sprintf("the cluster recorded the check value of key %q, which its voters hold", id)
			}
			if len(h.keys) == 0 {
				return "it has no --encryption-key-file, and " + why + ": start it with the cluster's key file (the same file as every node), and it is promoted once caught up"
			}
			return fmt.Sprintf("its --encryption-key-file lacks key %q (%s): copy the cluster's key file to it and restart it, and it is promoted once caught up", id, why)
		}
	}
	ids := make([]string, 0, len(have))
	for id := range have {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := have[id]
		if rec := checks[id]; rec != nil && c != hex.EncodeToString(rec) {
			return fmt.Sprintf("its key %q is not the cluster's key under that id (the check values differ: a key generated on that node instead of copied, or ids swapped or renamed in its file): copy the cluster's key file to it and restart it; never regenerate a key in use", id)
		}
		// None recorded yet (a member down, an upgrade under way): the
		// leader's own key under the id is the reference.
		if own := kr.Check(id); checks[id] == nil && own != nil && c != hex.EncodeToString(own) {
			return fmt.Sprintf("its key %q is not the leader's key under that id (the check values differ: a key generated on that node instead of copied, or ids swapped or renamed in its file): copy the cluster's key file to it and restart it; never regenerate a key in use", id)
		}
	}
	return ""
}

// keyCheck is the check value (hex) of key id in the node's last status,
// "" when its key file does not hold the id.
func (h *peerHealth) keyCheck(id string) string {
	for _, k := range h.keys {
		if k.ID == id {
			return k.Check
		}
	}
	return ""
}

// nodeKeys lists the node's keys with their check values, for Status.
func (n *Node) nodeKeys() []NodeKey {
	kr := n.Keyring()
	if kr == nil {
		return nil
	}
	out := make([]NodeKey, 0, len(kr.keys))
	for _, rk := range kr.keys {
		out = append(out, NodeKey{ID: rk.id, Check: hex.EncodeToString(rk.check)})
	}
	return out
}

// membersHave reports whether every other member has answered a health
// check of this leader's term listing feature.
func (n *Node) membersHave(feature string) bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	term := n.term()
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	return n.othersList(f.Configuration(), feature, term)
}

// othersList reports whether every member of conf but this node has
// answered a health check of term listing feature ("": any answer). The
// caller holds n.peers.mu.
func (n *Node) othersList(conf raft.Configuration, feature string, term uint64) bool {
	for _, s := range conf.Servers {
		if string(s.ID) == n.self.ID {
			continue
		}
		h := n.peers.byID[string(s.ID)]
		if n.peers.term != term || h == nil || h.answeredAt.IsZero() || feature != "" && !slices.Contains(h.features, feature) {
			return false
		}
	}
	return true
}

// promote makes one healthy, caught-up non-voter a voter. One per round:
// raft takes one configuration change at a time.
//
// The non-voter is picked from raft's own copy of the configuration; the
// log is read for the configuration's index only once one is to be
// promoted (latestConfiguration reads back every entry appended since its
// last call: each round, beside a non-voter kept back or still catching
// up, that was a pread and a decode of every entry the cluster took), and
// the promotion goes only if that configuration still holds it as such.
func (n *Node) promote() {
	if !n.confChange.TryLock() {
		return // a join or a removal is under way: the next round
	}
	defer n.confChange.Unlock()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	now := time.Now()
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Nonvoter {
			continue
		}
		n.peers.mu.Lock()
		h := n.peers.byID[string(s.ID)]
		ready := n.peers.term == n.term() && h != nil && !h.goodSince.IsZero() && now.Sub(h.goodSince) >= promoteStable
		var applied, lag uint64
		var why string
		if h != nil {
			applied, lag = h.applied, h.lag
			if why = n.notPromotable(h); why != h.refused {
				h.refused = why
				if why != "" {
					n.log.Warn("a caught-up non-voter is not made a voter", "node-id", s.ID, "reason", why)
				}
			}
		}
		n.peers.mu.Unlock()
		if !ready || why != "" {
			continue
		}
		conf, confIndex, err := n.latestConfiguration()
		if err != nil {
			return
		}
		if cur, err := server(conf, string(s.ID)); err != nil || *cur != s {
			return // the configuration changed meanwhile: the next round
		}
		if h := promoteHook.Load(); h != nil {
			(*h)(string(s.ID))
		}
		if err := n.wait(n.raft.AddVoter(s.ID, s.Address, confIndex, n.cfg.ApplyTimeout)); err != nil {
			n.log.Warn("promotion of a caught-up non-voter failed; retrying", "node-id", s.ID, "error", err)
			return
		}
		n.log.Info("promoted a caught-up non-voter to voter", "node-id", s.ID, "applied-index", applied, "lag", lag)
		return
	}
}

// promoteHook, when set (tests), runs as promote is about to make a
// caught-up non-voter a voter.
var promoteHook atomic.Pointer[func(id string)]

// WaitOthersFollow waits, after this node handed leadership over, until
// every other member it can reach names another leader, or ctx ends; it
// says whether they all did. Until then a follower may still forward a
// write here: a node that stops serving at once closes the idle
// connection that forward goes out on, and the follower, not knowing
// whether its write arrived, answers "outcome unknown". Meanwhile this
// node answers such forwards as not the leader, which the follower
// retries on the new one. A member that does not answer is not waited for.
func (n *Node) WaitOthersFollow(ctx context.Context) bool {
	probe := n.peerProbe()
	if probe == nil {
		return false
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if n.othersFollow(ctx, probe) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// othersFollow asks every other member which leader it knows.
func (n *Node) othersFollow(ctx context.Context, probe PeerProbe) bool {
	if n.IsLeader() {
		return false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, r := range n.askOthers(ctx, f.Configuration(), probe) {
		if r.err == nil && (r.st.Leader == nil || r.st.Leader.ID == n.self.ID) {
			return false
		}
	}
	return ctx.Err() == nil
}

// committedConf is the last membership configuration a node saw
// committed, so that Status can say what a change not committed yet
// changes (Member.CommittedSuffrage).
type committedConf struct {
	mu       sync.Mutex
	suffrage map[string]raft.ServerSuffrage
}

// see takes the node's latest configuration c and whether it is pending
// (Node.configPending). It remembers c if it is not, and otherwise
// returns the suffrages of the last configuration seen committed (nil:
// none seen since the node started).
func (cc *committedConf) see(c raft.Configuration, pending bool) (before map[string]raft.ServerSuffrage) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if pending {
		return cc.suffrage
	}
	m := make(map[string]raft.ServerSuffrage, len(c.Servers))
	for _, s := range c.Servers {
		m[string(s.ID)] = s.Suffrage
	}
	cc.suffrage = m
	return nil
}

// holds reports whether c is the configuration last seen committed.
func (cc *committedConf) holds(c raft.Configuration) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.suffrage == nil || len(cc.suffrage) != len(c.Servers) {
		return false
	}
	for _, s := range c.Servers {
		if was, ok := cc.suffrage[string(s.ID)]; !ok || was != s.Suffrage {
			return false
		}
	}
	return true
}

// pendingScan bounds the entries past the commit index configPending
// looks through: raft takes one membership change at a time, and the
// leader that appended it steps down when it cannot commit.
const pendingScan = 4096

// configPending reports whether this node's raft log holds a
// configuration entry past its commit index: raft's latest configuration
// is then one not committed yet (raft does not say which index its
// latest configuration is at).
func (n *Node) configPending() bool {
	if n.logStore == nil {
		return false
	}
	commit, last := n.raft.CommitIndex(), n.raft.LastIndex()
	last = min(last, commit+pendingScan)
	for i := commit + 1; i <= last; i++ {
		var l raft.Log
		if err := n.logStore.GetLog(i, &l); err != nil {
			return false
		}
		if l.Type == raft.LogConfiguration {
			return true
		}
	}
	return false
}

// errConfigMoving: the configuration changed each time latestConfiguration
// looked (a change of another goroutine or leader was being stored).
var errConfigMoving = errors.New("the cluster's membership was changing while this change was being decided; try again")

// latestConfiguration is raft's latest configuration and the index of the
// log entry it came from: the prevIndex a membership change decided on it
// must name. hashicorp/raft's GetConfiguration leaves its Index() 0, and a
// change naming 0 skips raft's check that no other configuration was
// appended since the one it was decided on. This node's lock (confChange)
// orders its own changes, not those of another leader: a leader that lost
// the lead while deciding, and won it back after another leader's change,
// would have applied a decision taken on the configuration before it.
//
// The index is read before and after the configuration, and must not
// move: raft takes a leader's change as its latest before it stores the
// entry, so a configuration read then is paired with the older index and
// raft refuses the change ("configuration changed since"), never the
// reverse.
func (n *Node) latestConfiguration() (raft.Configuration, uint64, error) {
	for range 3 {
		before, err := n.configIndex()
		if err != nil {
			return raft.Configuration{}, 0, err
		}
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return raft.Configuration{}, 0, mapRaftError(err)
		}
		after, err := n.configIndex()
		if err != nil {
			return raft.Configuration{}, 0, err
		}
		if before == after {
			return f.Configuration(), after, nil
		}
	}
	return raft.Configuration{}, 0, errConfigMoving
}

// configIndex is the index raft's latest configuration came from: the
// last configuration entry in this node's log, else the one the newest
// snapshot names (a configuration the log was compacted past). The scan
// stops at that snapshot's configuration index, nothing below it can be
// newer, and at the last entry it scanned before (configScan), if the log
// still holds that entry from the same term: raft's log matching makes
// everything up to it the same. The caller holds confChange.
func (n *Node) configIndex() (uint64, error) {
	var floor uint64
	if meta, ok := n.snaps.newestMeta(); ok {
		floor = meta.ConfigurationIndex
	}
	first, err := n.logStore.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("raftfsm: read the raft log for its configuration: %w", err)
	}
	last, err := n.logStore.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("raftfsm: read the raft log for its configuration: %w", err)
	}
	found, seen := uint64(0), n.configScan
	if seen.last > 0 && seen.last <= last && seen.last >= first {
		var l raft.Log
		if n.logStore.GetLog(seen.last, &l) == nil && l.Term == seen.term {
			found, floor = max(seen.found, floor), max(seen.last, floor)
		}
	}
	if h := configScanHook.Load(); h != nil {
		if err := (*h)(n); err != nil {
			return 0, err
		}
	}
	var lastTerm uint64
	for i := last; i > floor && i >= first && i > 0; i-- {
		var l raft.Log
		if err := n.logStore.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) && i < last {
				if now, ferr := n.logStore.FirstIndex(); ferr == nil && now > i {
					// A snapshot compacted the log under the scan (raft
					// takes them on its own, while a join waits for its
					// answer): everything from i down is in that snapshot,
					// whose configuration is the newest at or below its
					// index, and nothing above i was one. A join answered
					// 500 "internal error" here (CI, a leader compacting
					// every 64 entries).
					if meta, ok := n.snaps.newestMeta(); ok {
						// Newer than what an earlier scan found below i
						// (configScan), if the compacted span held one.
						found = max(found, meta.ConfigurationIndex)
					}
					break
				}
			}
			return 0, fmt.Errorf("raftfsm: read raft log entry %d for the configuration: %w", i, err)
		}
		if i == last {
			lastTerm = l.Term
		}
		if l.Type == raft.LogConfiguration {
			found = i
			break
		}
	}
	if found == 0 {
		found = floor
	}
	if found == 0 {
		return 0, errors.New("raftfsm: no configuration entry in the raft log or its snapshots")
	}
	if lastTerm > 0 {
		n.configScan = configScan{last: last, term: lastTerm, found: found}
	}
	return found, nil
}

// configScanHook, when set (tests only), runs in configIndex once it has
// read the log's bounds, before it scans the entries; an error it returns
// is configIndex's (a read of the log that failed).
var configScanHook atomic.Pointer[func(*Node) error]

// configScan is where configIndex's last scan began (the log's last entry
// and its term) and the configuration index it found.
type configScan struct{ last, term, found uint64 }

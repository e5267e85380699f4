package wire

import (
	"encoding/json"
	"time"
)

// Outcomes of successful answers.
const (
	OutcomeClaimed   = "claimed"
	OutcomeReplay    = "replay"
	OutcomeCompleted = "completed"
	OutcomeReleased  = "released"
	OutcomeExtended  = "extended"
	OutcomeDeleted   = "deleted"
)

// States of a record.
const (
	StateInProgress = "in_progress"
	StateCompleted  = "completed"
	StateFailed     = "failed"
)

// Consistency levels of a lookup.
const (
	ConsistencyLinearizable = "linearizable" // the server's default
	ConsistencyStale        = "stale"
)

// LeaderHeader names, on the answer to a write, the HTTP address (the
// --http-addr it advertises) of the leader that decided it. A client given
// several nodes sends its next writes there: a follower's forwarding costs
// a second HTTP exchange on two nodes, a third of the work per write on a
// loaded cluster. An answer that decided nothing names no leader.
const LeaderHeader = "Idem-Leader"

// TimeLayout is the form of every time on the wire: RFC 3339 UTC with
// milliseconds. encoding/json's own form of a time.Time drops trailing
// zeros, which the contract does not allow.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime returns t in TimeLayout, in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ClaimRequest is the body of POST /v1/claim.
type ClaimRequest struct {
	Principal   string `json:"principal"`
	Endpoint    string `json:"endpoint"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
	// LeaseMs is the lease in milliseconds; 0 leaves it to the server's
	// default.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// ClaimID names this attempt: repeating a claim with the same ClaimID
	// after a timeout or a 503 returns the same claim (the same token)
	// instead of a 409, while that attempt holds its lease. Once the lease
	// has run out, the repeat is a new claim like any other: a new attempt
	// and token when no one else holds the key, a 409 or a replay if
	// another attempt took it over meanwhile.
	ClaimID       string `json:"claim_id,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// ClaimResponse is a successful claim: Outcome "claimed" (201: the caller
// owns the attempt and holds Token) or "replay" (200: Record is the completed
// record whose response to send again).
type ClaimResponse struct {
	Outcome        string    `json:"outcome"`
	Token          string    `json:"token,omitempty"`
	Attempt        int       `json:"attempt,omitempty"`
	CreatedAt      time.Time `json:"created_at,omitzero"`
	ExpiresAt      time.Time `json:"expires_at,omitzero"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	Record         *Record   `json:"record,omitempty"`
	// StatusCode is the HTTP status that goes with Outcome: 201 claimed,
	// 200 replay. Not part of the body.
	StatusCode int `json:"-"`
	// Raw is the body of the answer as received (set by the Go client).
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON writes the times in TimeLayout.
func (c ClaimResponse) MarshalJSON() ([]byte, error) {
	type plain ClaimResponse
	return Marshal(struct {
		plain
		CreatedAt      string `json:"created_at,omitempty"`
		ExpiresAt      string `json:"expires_at,omitempty"`
		LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	}{plain(c), optTime(c.CreatedAt), optTime(c.ExpiresAt), optTime(c.LeaseExpiresAt)})
}

// CompleteRequest is the body of POST /v1/complete.
type CompleteRequest struct {
	Principal string   `json:"principal"`
	Endpoint  string   `json:"endpoint"`
	Key       string   `json:"key"`
	Token     string   `json:"token"`
	Response  Response `json:"response"`
}

// CompleteResponse is a successful complete: Outcome "completed" and the
// stored record.
type CompleteResponse struct {
	Outcome string          `json:"outcome"`
	Record  *Record         `json:"record,omitempty"`
	Raw     json.RawMessage `json:"-"`
}

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	Principal string `json:"principal"`
	Endpoint  string `json:"endpoint"`
	Key       string `json:"key"`
	Token     string `json:"token"`
	Reason    string `json:"reason,omitempty"`
}

// ReleaseResponse is a successful release: Outcome "released".
type ReleaseResponse struct {
	Outcome string          `json:"outcome"`
	Raw     json.RawMessage `json:"-"`
}

// ExtendRequest is the body of POST /v1/extend.
type ExtendRequest struct {
	Principal string `json:"principal"`
	Endpoint  string `json:"endpoint"`
	Key       string `json:"key"`
	Token     string `json:"token"`
	LeaseMs   int64  `json:"lease_ms"` // required by the server
}

// ExtendResponse is a successful extend: Outcome "extended" and the new end
// of the lease.
type ExtendResponse struct {
	Outcome        string          `json:"outcome"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at,omitzero"`
	Raw            json.RawMessage `json:"-"`
}

// MarshalJSON writes the time in TimeLayout.
func (e ExtendResponse) MarshalJSON() ([]byte, error) {
	type plain ExtendResponse
	return Marshal(struct {
		plain
		LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	}{plain(e), optTime(e.LeaseExpiresAt)})
}

// DeleteResponse is a successful eviction: Outcome "deleted".
type DeleteResponse struct {
	Outcome string          `json:"outcome"`
	Raw     json.RawMessage `json:"-"`
}

// Record is an idempotency record as a lookup shows it (never with a token).
// LeaseExpiresAt is set only while in_progress; CompletedAt and Response only
// when completed. Zero times are absent.
type Record struct {
	Principal      string    `json:"principal"`
	Endpoint       string    `json:"endpoint"`
	Key            string    `json:"key"`
	State          string    `json:"state"`
	Fingerprint    string    `json:"fingerprint"`
	Attempt        int       `json:"attempt"`
	CorrelationID  string    `json:"correlation_id,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	CompletedAt    time.Time `json:"completed_at,omitzero"`
	Response       *Response `json:"response,omitempty"`
}

// MarshalJSON writes the times in TimeLayout.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	return Marshal(struct {
		plain
		CreatedAt      string `json:"created_at"`
		ExpiresAt      string `json:"expires_at"`
		LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
		CompletedAt    string `json:"completed_at,omitempty"`
	}{plain(r), FormatTime(r.CreatedAt), FormatTime(r.ExpiresAt), optTime(r.LeaseExpiresAt), optTime(r.CompletedAt)})
}

// LookupResponse is the answer of GET /v1/records.
type LookupResponse struct {
	Record *Record `json:"record"`
}

func optTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return FormatTime(t)
}

// ServerConfig is the answer of GET /v1/config.
type ServerConfig struct {
	Retention        string `json:"retention"` // Go duration syntax, e.g. "24h0m0s"
	RetentionSeconds int64  `json:"retention_seconds"`
	LeaseDefaultMs   int64  `json:"lease_default_ms"`
	Scope            string `json:"scope"` // "endpoint" or "principal"
	BucketWidth      string `json:"bucket_width,omitempty"`
	// Limits are the server's limits by name; their set may grow.
	Limits map[string]any `json:"limits,omitempty"`
	// AuthFileDigest is a digest of the node's --auth-file ("none"
	// without one); an earlier release leaves it out.
	AuthFileDigest string `json:"auth_file_digest,omitempty"`
	// AuthFileReloadError is why the node's last SIGHUP did not reload
	// its --auth-file (the tokens loaded before stay in force); absent
	// when it did.
	AuthFileReloadError string `json:"auth_file_reload_error,omitempty"`
	// TLSReloadError is why the node's last SIGHUP did not reload its
	// --tls-* files (the certificates and CAs loaded before stay in
	// force); absent when it did.
	TLSReloadError string `json:"tls_reload_error,omitempty"`
	// CommitTimeoutMs is the node's --commit-timeout in milliseconds; an
	// earlier release leaves it out (0).
	CommitTimeoutMs int64           `json:"commit_timeout_ms,omitempty"`
	Raw             json.RawMessage `json:"-"`
}

// LeaseOutside reports whether a claim's lease (sent as its whole
// milliseconds) is outside the server's --min-lease/--max-lease, which it
// publishes as the limits min_lease_ms and max_lease_ms, and those
// bounds; false when it publishes them not (an earlier release), as the
// server would then refuse no lease for them.
func (c *ServerConfig) LeaseOutside(lease time.Duration) (outside bool, min, max time.Duration) {
	lo, okLo := c.Limits["min_lease_ms"].(float64)
	hi, okHi := c.Limits["max_lease_ms"].(float64)
	if !okLo || !okHi {
		return false, 0, 0
	}
	ms := float64(lease.Milliseconds())
	return ms < lo || ms > hi, time.Duration(lo) * time.Millisecond, time.Duration(hi) * time.Millisecond
}

// Node is a member of the cluster. Leader answers carry only the addresses.
type Node struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage,omitempty"`
	Healthy  bool   `json:"healthy,omitempty"`
}

// Cluster is the answer of GET /v1/cluster. Leader is nil while there is
// none.
type Cluster struct {
	Leader       *Node           `json:"leader"`
	Nodes        []Node          `json:"nodes"`
	Term         uint64          `json:"term"`
	CommitIndex  uint64          `json:"commit_index"`
	AppliedIndex uint64          `json:"applied_index"`
	Raw          json.RawMessage `json:"-"`
}

// JoinRequest is the body of POST /v1/cluster/join. A new node joins as a
// non-voter; the leader promotes it once it answers and has caught up.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Scope is the joining node's --scope ("endpoint" or "principal"); the
	// cluster refuses a node whose scope differs from its own (409
	// scope_mismatch). Empty: not checked.
	Scope string `json:"scope,omitempty"`
	// Force skips the check that the cluster has a quorum of healthy voters.
	Force bool `json:"force,omitempty"`
}

// RemoveRequest is the body of POST /v1/cluster/remove.
type RemoveRequest struct {
	ID string `json:"id"`
	// Force removes a voter even when fewer than a quorum of the remaining
	// voters are healthy (409 would_lose_quorum otherwise). The last voter
	// can never be removed.
	Force bool `json:"force,omitempty"`
}

package raftfsm

import (
	"github.com/idem-store/idem/engine"
)

// Op is the kind of a command.
type Op uint8

// Commands proposed through the log.
const (
	OpClaim Op = iota + 1
	OpComplete
	OpRelease
	OpExtend
	OpDelete
	OpDropBucket
	OpTick    // advances cluster time when the cluster is idle
	OpSetNode // node metadata (HTTP address) travels through the log
	OpRemoveNode
	OpSetSecret // the cluster's fencing-token key (secret.go); the first one applied stays
	OpBatch     // client operations of one batch in one entry, applied in order (batch.go)
	// OpSetRetention sets the cluster's retention of records claimed from
	// then on (engine.Meta.RetentionMs); stored records keep their expiry.
	OpSetRetention
	// OpKeyCheck records the check value of an encryption key id
	// (keyuse.go); the first one applied per id stays. A node of an
	// earlier release skips it (ErrBadCommand): the leader proposes it only
	// once every member lists FeatureKeyCheck.
	OpKeyCheck
)

// Command is one log entry. NowMs is cluster time stamped by the leader that
// proposed it; WidthMs is the bucket width the cluster was created with.
type Command struct {
	Op       Op                `json:"op"`
	NowMs    int64             `json:"now"`
	WidthMs  int64             `json:"w,omitempty"`
	Claim    *engine.ClaimArgs `json:"claim,omitempty"`
	Target   *engine.TokenArgs `json:"target,omitempty"`
	Response *engine.Response  `json:"resp,omitempty"`
	LeaseMs  int64             `json:"lease,omitempty"`
	Bucket   uint64            `json:"bucket,omitempty"`
	Node     *NodeInfo         `json:"node,omitempty"`
	Secret   []byte            `json:"secret,omitempty"` // OpSetSecret: random bytes chosen by the proposing leader
	// RetentionMs is OpSetRetention's new retention.
	RetentionMs int64 `json:"retention,omitempty"`
	// KeyCheck is OpKeyCheck's key id and check value.
	KeyCheck *KeyCheck `json:"key_check,omitempty"`

	// sealTerm is the term sealReady passed the value this command seals
	// in (0: not checked); propose checks again in any other (sealBound).
	sealTerm uint64
	// capTerm is the term in which the leader checked the claim's
	// credential cap itself (Node.capGate), 0 if it did not.
	capTerm uint64
}

// sealsValue reports whether the command stores a value a leader seals
// (sealReady guards it): a claim's correlation id, a complete's response.
func (c *Command) sealsValue() bool {
	switch c.Op {
	case OpClaim:
		return c.Claim != nil && c.Claim.CorrelationID != ""
	case OpComplete:
		return c.Response != nil
	}
	return false
}

// KeyCheck is a key id and the check value of its key (crypt.go keyCheck):
// it proves which key the id names without revealing it.
type KeyCheck struct {
	ID    string `json:"id"`
	Check []byte `json:"check"`
}

// NodeInfo is what every node knows of every other.
type NodeInfo struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// ApplyResult is what Apply returns for a command: the engine's decision,
// the fencing token of a new claim (its raft index), or an error that is the
// same on every replica (a malformed command).
type ApplyResult struct {
	engine.Result
	Index uint64
	Err   error
	// Batch holds the result of each operation of an OpBatch entry, in order.
	Batch []*ApplyResult
	nodes bool // the entry changed the stored node addresses
}

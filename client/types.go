package client

import "github.com/idem-store/idem/wire"

// The bodies of the API are defined once, in package wire, and shared with
// the server; these names keep the client's API as it was.

// Outcomes of successful answers.
const (
	OutcomeClaimed   = wire.OutcomeClaimed
	OutcomeReplay    = wire.OutcomeReplay
	OutcomeCompleted = wire.OutcomeCompleted
	OutcomeReleased  = wire.OutcomeReleased
	OutcomeExtended  = wire.OutcomeExtended
	OutcomeDeleted   = wire.OutcomeDeleted
)

// States of a record.
const (
	StateInProgress = wire.StateInProgress
	StateCompleted  = wire.StateCompleted
	StateFailed     = wire.StateFailed
)

// Consistency levels of Get.
const (
	ConsistencyLinearizable = wire.ConsistencyLinearizable // the server's default
	ConsistencyStale        = wire.ConsistencyStale
)

type (
	// ClaimRequest is the body of POST /v1/claim.
	ClaimRequest = wire.ClaimRequest
	// ClaimResponse is a successful claim: "claimed" (201) or "replay" (200).
	ClaimResponse = wire.ClaimResponse
	// Response is an HTTP response stored by Complete and replayed verbatim;
	// a header sent more than once goes in HeaderLists (Response.SetHeader).
	Response = wire.Response
	// CompleteRequest is the body of POST /v1/complete.
	CompleteRequest = wire.CompleteRequest
	// CompleteResponse is a successful complete.
	CompleteResponse = wire.CompleteResponse
	// ReleaseRequest is the body of POST /v1/release.
	ReleaseRequest = wire.ReleaseRequest
	// ReleaseResponse is a successful release.
	ReleaseResponse = wire.ReleaseResponse
	// ExtendRequest is the body of POST /v1/extend.
	ExtendRequest = wire.ExtendRequest
	// ExtendResponse is a successful extend.
	ExtendResponse = wire.ExtendResponse
	// DeleteResponse is a successful eviction.
	DeleteResponse = wire.DeleteResponse
	// Record is an idempotency record as a lookup shows it.
	Record = wire.Record
	// ServerConfig is the answer of GET /v1/config.
	ServerConfig = wire.ServerConfig
	// Node is a member of the cluster.
	Node = wire.Node
	// Cluster is the answer of GET /v1/cluster.
	Cluster = wire.Cluster
	// JoinRequest is the body of POST /v1/cluster/join.
	JoinRequest = wire.JoinRequest
	// RemoveRequest is the body of POST /v1/cluster/remove.
	RemoveRequest = wire.RemoveRequest
)

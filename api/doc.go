// Package api serves idem's HTTP API (docs/API.md): JSON requests
// validated against the limits, decisions taken by the Store, answers as
// JSON or RFC 9457 problem documents, and transparent forwarding of writes
// and linearizable reads from a follower to the leader.
//
// The package defines the small Store interface it consumes; raftfsm.Node
// implements it. Nothing malformed reaches the Store: every 4xx is decided
// here, before anything is proposed, so a bad request writes nothing.
package api

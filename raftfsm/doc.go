// Package raftfsm runs idem's raft node and its finite state machine: the
// commands proposed through the log, Apply/ApplyBatch onto the engine,
// snapshots, linearizable reads, cluster time, and the leader's expiry
// sweeper.
//
// The FSM honours hashicorp/raft's contract, restated here because every
// replica's safety depends on it:
//
//   - Apply must be deterministic: the same log gives the same state on every
//     node. Our Apply reads no wall clock, no randomness and no local
//     configuration; time, retention, limits and the bucket width all arrive
//     in the command.
//   - Apply is idempotent across restarts: the applied index is written in
//     the same Pebble batch as the data, and entries at or below it are
//     skipped when raft replays its log after a restart.
//   - Snapshot must return quickly: it takes a Pebble snapshot (after
//     syncing Pebble, which otherwise relies on the raft log for durability)
//     and Persist streams it with a checksum.
//   - Restore replaces the whole state atomically.
//   - A storage error inside Apply is fatal (panic): returning it would let
//     replicas diverge.
package raftfsm

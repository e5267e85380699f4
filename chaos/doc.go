// Package chaos is idem's Jepsen-style failure test, shipped with the
// product as `idem chaos`. It starts a real cluster of `idem serve`
// processes on 127.0.0.1..N (cluster.go), drives concurrent clients that
// contend on a small set of scopes and record every operation with its
// invocation and completion time (workload.go, history.go), injects faults
// on a seeded schedule — kill -9, SIGSTOP, network partitions with
// iptables, skewed clocks, membership changes, catch-up by snapshot
// (nemesis.go) — and then checks the history: linearizability against a
// model of one idempotency record per scope with porcupine (model.go), plus
// invariants the model cannot see: one live winner per scope, no record
// absent early, no response shown to another tenant, every acknowledged
// complete replayed byte-identically after healing, and the same state on
// every replica (check.go). report.go prints the summary and writes
// history.json and an HTML timeline.
//
// The package speaks to the nodes only over HTTP through package client; it
// imports nothing of the server.
//
// The workload uses long leases (5 minutes) and the default 24h retention
// and rotates its contended keys every 30 s, so within a run no lease and no
// record may expire: the model needs no clock, and any takeover or absence
// it sees is a bug (a clock nemesis that made a node's leases run out would
// show up as one).
package chaos

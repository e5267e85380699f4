// Package chaos is idem's Jepsen-style failure test, shipped with the
// product as `idem chaos`. It starts a real cluster of `idem serve`
// processes on 127.0.0.1..N (cluster.go), drives concurrent clients that
// contend on a small set of scopes and record every operation with its
// invocation and completion time (workload.go, history.go), injects faults
// on a seeded schedule — kill -9, SIGSTOP of the leader or of every node
// for up to --pause-max, network partitions with iptables or a proxy,
// skewed clocks, a wiped node rejoining, catch-up by snapshot
// (nemesis.go); a lost fsm directory, a clean restart of the whole
// cluster, careless membership changes (operator.go) — and then checks the
// history: linearizability against a model of one idempotency record per
// scope with porcupine (model.go), plus invariants the model cannot see:
// one live winner per scope, no record absent early, no response shown to
// another tenant, every acknowledged complete replayed byte-identically
// after healing, the same state on every replica, and cluster time never
// running ahead of real time (check.go). Liveness
// is checked from a record too (liveness.go): every node's /readyz is
// polled throughout, and a node unready for longer than a bound after a
// nemesis heals, or a cluster on which no operation succeeds for that
// long, is a violation. report.go prints the summary and writes
// history.json and an HTML timeline.
//
// The package speaks to the nodes only over HTTP through package client
// (and reads their data dirs' snapshot metadata from disk); it imports
// nothing of the server.
//
// The workload uses long leases (5 minutes) and a retention longer than
// the run (RetentionFor) and rotates its contended keys every 15 s, so
// within a run no lease and no record may expire: the model needs no
// clock, and any takeover or absence it sees is a bug. A record or lease
// cut short by seconds (a leader's first entries after a long pause
// decided at a capped time, cluster time then jumping on) therefore shows
// in no answer; ClockChecks sees it in the times the claims' answers
// carry: cluster time must never move on faster than the harness's clock. The retention is
// also shorter than the hour the fsm-loss nemesis skews a clock by, so a
// cluster time that followed that clock would expire every record, and the
// checker would see the records vanish.
package chaos

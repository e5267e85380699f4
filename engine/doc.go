// Package engine is idem's storage: Pebble with the key layout of docs/DESIGN.md,
// the record codec, and the state transitions of an idempotency record
// (compare-and-insert claim, complete, release, extend, delete, bucket drop).
//
// Key layout:
//
//	m/<name>                                   meta: applied index, cluster time, width, max retention, scope mode, retention
//	b<bucket u64 BE>/r/<scope>                  record (bucket = floor(expires_at / width))
//	b<bucket u64 BE>/l/<lease ms BE>/<scope>    in-progress claims by lease deadline; value: created ms
//	b<bucket u64 BE>/q/<principal>              live-key count of the principal in that bucket
//	b<bucket u64 BE>/s/                         bucket stats: records, bytes, oldest created_at
//	q/<principal>                               the principal's stored keys over all buckets
//
// <scope> is length-prefixed (uvarint length before each of principal,
// endpoint and key) so ("a","bc") and ("ab","c") never collide, and nothing is
// ever looked up by key alone. Everything about a record lives under its
// bucket, so DropBucket is one DeleteRange. The one exception is the
// per-principal total q/<principal>, kept so a claim checks its quota with
// one Get instead of one per bucket; a drop subtracts the bucket's
// per-principal counts from it (one update per principal, not per key).
//
// The engine never reads a clock: every operation takes cluster time as an
// argument. Writes go through a Txn (a Pebble indexed batch) so one raft
// batch is one atomic Pebble commit, and later commands in a batch see the
// effects of earlier ones.
package engine

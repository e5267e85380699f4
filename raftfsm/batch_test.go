package raftfsm

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

func TestBatchEntryRoundTrip(t *testing.T) {
	s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
	ops := []*Command{
		{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 60_000, MaxKeys: 5}},
		{Op: OpComplete, Target: &engine.TokenArgs{Scope: s, Token: 7}, Response: &engine.Response{Status: 201, Body: []byte("x")}},
		{Op: OpRelease, Target: &engine.TokenArgs{Scope: s, Token: 7}},
		{Op: OpExtend, Target: &engine.TokenArgs{Scope: s, Token: 7}, LeaseMs: 500},
	}
	b, err := encodeBatch(123, 456, ops)
	require.NoError(t, err)
	require.True(t, isBatchEntry(b))
	now, width, subs, err := decodeBatch(b)
	require.NoError(t, err)
	require.Equal(t, int64(123), now)
	require.Equal(t, int64(456), width)
	require.Len(t, subs, len(ops))
	for i, sb := range subs {
		c, err := DecodeCommand(sb)
		require.NoError(t, err)
		require.Equal(t, ops[i].Op, c.Op)
	}
	for n := 0; n < len(b); n++ {
		_, _, _, err := decodeBatch(b[:n])
		require.ErrorIs(t, err, ErrBadCommand, "truncated at %d", n)
	}
	_, err = encodeBatch(1, 1, []*Command{{Op: OpDropBucket}})
	require.Error(t, err, "only client operations are batched")
}

// A batch entry that does not decode, or holds an op that may not be
// batched, changes nothing and is refused alike on every replica.
func TestBadBatchEntryChangesNothing(t *testing.T) {
	f, _ := mustFSM(t, t.TempDir())
	drop, err := (&Command{Op: OpDropBucket, Bucket: 1}).Encode()
	require.NoError(t, err)
	bad := []byte{codecBatch, 2, 2, 1} // one op, no bytes
	smuggled := append([]byte{codecBatch, 2, 2, 1, byte(len(drop))}, drop...)
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: bad},
		{Index: 2, Type: raft.LogCommand, Data: smuggled},
	})
	require.ErrorIs(t, out[0].(*ApplyResult).Err, ErrBadCommand)
	require.ErrorIs(t, out[1].(*ApplyResult).Batch[0].Err, ErrBadCommand)
}

func TestSplitEntriesKeepsOneAttemptPerRecordPerEntry(t *testing.T) {
	claim := func(k string) *Command {
		return &Command{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: k}}}
	}
	release := func(k string) *Command {
		return &Command{Op: OpRelease, Target: &engine.TokenArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: k}}}
	}
	cmds := []*Command{claim("a"), claim("b"), release("a"), claim("a"), claim("c"), claim("b")}
	require.Equal(t, [][]int{{0, 1, 2}, {3, 4, 5}}, splitEntries(cmds, []int{0, 1, 2, 3, 4, 5}))
	require.Equal(t, [][]int{{1, 3, 4}}, splitEntries(cmds, []int{1, 3, 4}))
}

// The oracle: the same ops decided by Batch on one node and one at a time
// on another fresh node give the same outcomes, in order.
func TestBatchDecidesAsSinglesDo(t *testing.T) {
	sc := func(k string) engine.Scope { return engine.Scope{Principal: "p", Endpoint: "e", Key: k} }
	claim := func(k, fp, id string) BatchOp {
		return BatchOp{Op: OpClaim, Claim: &engine.ClaimArgs{Scope: sc(k), Fingerprint: fp, ClaimID: id, LeaseMs: 60_000, RetentionMs: 3_600_000, MaxKeys: 6}}
	}
	// Tokens are raft indexes here, different on the two nodes: a token op
	// names the claim (by its position in the first round) whose token it
	// carries, or none (a stale token). Claims of one entry share its index:
	// binding a token to its scope is the API's MAC (api/fencing.go), so
	// ops here use only their own scope's token.
	type tokOp struct {
		op    Op
		key   string
		claim int // index into round 1's results; -1: token 1, never current
	}
	round1 := []BatchOp{
		claim("a", "aa", "x"), claim("a", "aa", "x"), claim("a", "aa", "y"), claim("a", "bb", ""),
		claim("b", "aa", ""), claim("c", "aa", ""), claim("d", "aa", ""), claim("e", "aa", ""), claim("f", "aa", ""),
		claim("g", "aa", ""), // over the quota of 6
	}
	round2 := []tokOp{
		{OpComplete, "a", 0}, {OpComplete, "a", 0}, {OpRelease, "b", 4}, {OpExtend, "c", 5},
		{OpComplete, "d", -1}, {OpRelease, "zz", -1}, {OpRelease, "a", 0}, {OpExtend, "e", 7},
	}
	round3 := []BatchOp{claim("a", "aa", ""), claim("b", "aa", "q"), claim("b", "aa", "r"), claim("d", "bb", "")}

	run := func(n *Node, batched bool) []string {
		var got []string
		decide := func(ops []BatchOp) []BatchResult {
			if batched {
				return n.Batch(ops)
			}
			out := make([]BatchResult, len(ops))
			for i, op := range ops {
				r := &out[i]
				switch op.Op {
				case OpClaim:
					r.Result, r.Index, r.Err = n.Claim(*op.Claim)
				case OpComplete:
					r.Result, r.Err = n.Complete(*op.Target, op.Response)
				case OpRelease:
					r.Result, r.Err = n.Release(*op.Target)
				case OpExtend:
					r.Result, r.Err = n.Extend(*op.Target, op.LeaseMs)
				}
			}
			return out
		}
		describe := func(rs []BatchResult) {
			for _, r := range rs {
				require.NoError(t, r.Err)
				s := r.Outcome.String()
				if r.Record != nil {
					s += fmt.Sprintf(" attempt=%d state=%s", r.Record.Attempt, r.Record.State)
				}
				got = append(got, s)
			}
		}
		r1 := decide(round1)
		describe(r1)
		ops := make([]BatchOp, len(round2))
		for i, o := range round2 {
			tok := uint64(1)
			if o.claim >= 0 {
				tok = r1[o.claim].Record.Token
			}
			ops[i] = BatchOp{Op: o.op, Target: &engine.TokenArgs{Scope: sc(o.key), Token: tok}, LeaseMs: 2000,
				Response: &engine.Response{Status: 201, Body: []byte(o.key)}}
		}
		describe(decide(ops))
		describe(decide(round3))
		return got
	}
	singles := run(mustNode(t), false)
	batched := run(mustNode(t), true)
	require.Equal(t, singles, batched)
	t.Log(singles)
}

// One winner per record under batches and single claims racing.
func TestBatchOneWinnerUnderConcurrency(t *testing.T) {
	n := mustNode(t)
	const keys, callers = 20, 8
	var mu sync.Mutex
	winners := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ops []BatchOp
			for k := 0; k < keys; k++ {
				a := engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprint(k)}, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 60_000}
				if c%2 == 0 {
					res, _, err := n.Claim(a)
					require.NoError(t, err)
					if res.Outcome == engine.OutcomeClaimed {
						mu.Lock()
						winners[a.Scope.Key]++
						mu.Unlock()
					}
					continue
				}
				ops = append(ops, BatchOp{Op: OpClaim, Claim: &a}, BatchOp{Op: OpClaim, Claim: &a})
			}
			for _, r := range n.Batch(ops) {
				require.NoError(t, r.Err)
				if r.Outcome == engine.OutcomeClaimed {
					mu.Lock()
					winners[r.Record.Key]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, winners, keys)
	for k, w := range winners {
		require.Equal(t, 1, w, "key %s", k)
	}
}

package chaos

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// h builds hand-written histories: each op has a call and return time.
type hb struct{ ops []*Op }

const (
	sP, sE, sK = "p0", "POST /a", "k0"
	fp         = "aa"
)

func (b *hb) add(call, ret int64, o *Op) *Op {
	o.Principal, o.Endpoint, o.Key = sP, sE, sK
	o.Call, o.Return, o.ID, o.Process = call, ret, len(b.ops), len(b.ops)
	if o.Outcome == "" {
		o.Outcome = OK
	}
	b.ops = append(b.ops, o)
	return o
}

func claimOK(cid, tok string, attempt int) *Op {
	return &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: cid, Status: 201, ResToken: tok, Attempt: attempt}
}

func resp(n string) *Response {
	return &Response{Status: 201, Body: []byte(sP + "|" + sE + "|" + sK + "|" + n)}
}

func complete(tok, body string, status int, code string, stored string) *Op {
	o := &Op{Kind: KindComplete, Token: tok, Response: resp(body), Status: status, Code: code}
	if stored != "" {
		o.RecResp = resp(stored)
	}
	return o
}

func replay(cid, body string, attempt int) *Op {
	return &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: cid, Status: 200, RecResp: resp(body), Attempt: attempt, RecFP: fp, State: "completed"}
}

func lookup(state string, attempt int, body string) *Op {
	o := &Op{Kind: KindLookup, Status: 200, State: state, Attempt: attempt, RecFP: fp}
	if body != "" {
		o.RecResp = resp(body)
	}
	return o
}

func linearizable(t *testing.T, b *hb) bool {
	t.Helper()
	r := porcupine.CheckOperationsTimeout(Model(), porcupineOps(b.ops), 0)
	require.NotEqual(t, porcupine.Unknown, r)
	return r == porcupine.Ok
}

func TestModelAcceptsCorrectHistories(t *testing.T) {
	cases := map[string]func(b *hb){
		"claim, complete, replay, lookup": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 200, "", "0"))
			b.add(40, 50, replay("b", "0", 1))
			b.add(60, 70, lookup("completed", 1, "0"))
		},
		"a claim and a complete refused 507 change nothing": func(b *hb) {
			b.add(0, 10, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "a", Status: 507, Code: "storage_full"})
			b.add(20, 30, &Op{Kind: KindLookup, Status: 404})
			b.add(40, 50, claimOK("b", "5", 1))
			b.add(60, 70, complete("5", "0", 507, "storage_full", ""))
			b.add(80, 90, lookup("in_progress", 1, ""))
		},
		"concurrent claims: one wins, one sees in_progress": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(0, 10, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "b", Status: 409, Code: "in_progress"})
		},
		"retry with the same claim_id gets the same token": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, claimOK("a", "5", 1))
		},
		"release then a new attempt with a greater token": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindRelease, Token: "5", Status: 200})
			b.add(40, 50, claimOK("b", "9", 2))
			b.add(60, 70, &Op{Kind: KindExtend, Token: "5", Status: 409, Code: "token_mismatch"})
			b.add(60, 70, &Op{Kind: KindRelease, Token: "9", Status: 200})
			b.add(80, 90, &Op{Kind: KindRelease, Token: "9", Status: 200}) // repeat
		},
		"lost claim answer, learned by a retry": func(b *hb) {
			b.add(0, 10, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "a", Outcome: Info})
			b.add(20, 30, lookup("in_progress", 1, ""))
			b.add(40, 50, claimOK("a", "7", 1))
			b.add(60, 70, complete("7", "1", 200, "", "1"))
		},
		"lost complete answer may have applied": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindComplete, Token: "5", Response: resp("0"), Outcome: Info})
			b.add(40, 50, replay("b", "0", 1))
		},
		"lost complete answer may not have applied": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindComplete, Token: "5", Response: resp("0"), Outcome: Info})
			b.add(40, 50, lookup("in_progress", 1, ""))
		},
		"complete is idempotent, a different response is refused": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 200, "", "0"))
			b.add(40, 50, complete("5", "0", 200, "", "0"))
			b.add(40, 50, complete("5", "1", 409, "already_completed", ""))
			b.add(60, 70, &Op{Kind: KindRelease, Token: "5", Status: 409, Code: "already_completed"})
		},
		"another fingerprint is refused": func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindClaim, Fingerprint: "bb", ClaimID: "b", Status: 422, Code: "fingerprint_mismatch"})
		},
		"absent until claimed": func(b *hb) {
			b.add(0, 10, &Op{Kind: KindLookup, Status: 404})
			b.add(0, 10, &Op{Kind: KindComplete, Token: "3", Response: resp("0"), Status: 404})
			b.add(20, 30, claimOK("a", "5", 1))
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			b := &hb{}
			build(b)
			require.True(t, linearizable(t, b))
			require.Empty(t, invariants(b.ops))
		})
	}
}

func TestModelRejectsBrokenHistories(t *testing.T) {
	cases := map[string]struct {
		build     func(b *hb)
		invariant string // the invariant check that must also fire, if any
	}{
		"two concurrent claims both win with different tokens": {build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(0, 10, claimOK("b", "6", 1))
		}},
		"a second winner after an acknowledged claim": {invariant: VEarlyAbsence, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, claimOK("b", "6", 1))
		}},
		"a new attempt without a release": {invariant: VTwoWinners, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, claimOK("b", "6", 2))
		}},
		"a replay with a different body": {invariant: VLostComplete, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 200, "", "0"))
			b.add(40, 50, replay("b", "1", 1))
		}},
		"a token that goes backwards": {invariant: VTokenOrder, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindRelease, Token: "5", Status: 200})
			b.add(40, 50, claimOK("b", "4", 2))
		}},
		"a record absent after it was claimed": {invariant: VEarlyAbsence, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindLookup, Status: 404})
		}},
		"a stale read after a complete": {invariant: VLostComplete, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 200, "", "0"))
			b.add(40, 50, lookup("in_progress", 1, ""))
		}},
		"a second complete with another response wins": {build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 200, "", "0"))
			b.add(40, 50, complete("5", "1", 200, "", "1"))
		}},
		"the same claim_id gets another token": {build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, claimOK("a", "6", 1))
		}},
		"in_progress refused to the claim_id holding the lease": {build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "a", Status: 409, Code: "in_progress"})
		}},
		"a claim answered 507 that took effect": {build: func(b *hb) {
			b.add(0, 10, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "a", Status: 507, Code: "storage_full"})
			b.add(20, 30, lookup("in_progress", 1, ""))
		}},
		"a complete answered 507 that took effect": {build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			b.add(20, 30, complete("5", "0", 507, "storage_full", ""))
			b.add(40, 50, lookup("completed", 1, "0"))
		}},
		"a lookup answered 507 (reads go on on a full disk)": {invariant: VUnexpected, build: func(b *hb) {
			b.add(0, 10, &Op{Kind: KindLookup, Status: 507, Code: "storage_full"})
		}},
		"a response shown to another scope": {invariant: VOtherTenant, build: func(b *hb) {
			b.add(0, 10, claimOK("a", "5", 1))
			o := b.add(20, 30, complete("5", "0", 200, "", ""))
			o.RecResp = &Response{Status: 201, Body: []byte("p1|POST /a|k0|0")}
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := &hb{}
			c.build(b)
			require.False(t, linearizable(t, b), "porcupine accepted a broken history")
			if c.invariant != "" {
				var kinds []string
				for _, v := range invariants(b.ops) {
					kinds = append(kinds, v.Kind)
				}
				require.Contains(t, kinds, c.invariant)
			}
		})
	}
}

// An operation whose answer was lost must not hide a violation it could
// not explain: a lost release cannot justify a new attempt with a smaller
// token, and a lost claim of another fingerprint cannot make a replay.
func TestModelInfoOpsAllowEitherOutcomeOnly(t *testing.T) {
	b := &hb{}
	b.add(0, 10, claimOK("a", "5", 1))
	b.add(20, 30, &Op{Kind: KindRelease, Token: "5", Outcome: Info})
	b.add(40, 50, claimOK("b", "7", 2))
	require.True(t, linearizable(t, b))
	require.Empty(t, invariants(b.ops))

	b = &hb{}
	b.add(0, 10, &Op{Kind: KindClaim, Fingerprint: fp, ClaimID: "a", Outcome: Info})
	b.add(20, 30, replay("b", "0", 1))
	require.False(t, linearizable(t, b))
}

func TestCheckNamesTheScope(t *testing.T) {
	b := &hb{}
	b.add(0, 10, claimOK("a", "5", 1))
	b.add(0, 10, claimOK("b", "6", 1))
	r := Check(b.ops, 0, false)
	require.Equal(t, porcupine.Illegal, r.Linearizable)
	require.Len(t, r.Violations, 1)
	require.Equal(t, VLinearizability, r.Violations[0].Kind)
	require.Equal(t, "p0|POST /a|k0", r.Violations[0].Scope)
}

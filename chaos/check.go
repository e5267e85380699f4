package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is one thing the store did wrong.
type Violation struct {
	Kind   string `json:"kind"`
	Scope  string `json:"scope,omitempty"`
	Detail string `json:"detail"`
	Ops    []int  `json:"ops,omitempty"` // ids of the operations involved
	At     int64  `json:"at_ns"`
}

// Kinds of violation.
const (
	VLinearizability = "not-linearizable"
	VTwoWinners      = "two-live-winners"
	VTokenOrder      = "token-not-increasing"
	VEarlyAbsence    = "absent-before-expiry"
	VOtherTenant     = "response-of-another-scope"
	VLostComplete    = "acknowledged-complete-not-replayed"
	VDiverged        = "replicas-diverged"
	VUnexpected      = "unexpected-answer"
	VNotConverged    = "replicas-not-converged"
	VNotReady        = "node-not-ready"
	VNoProgress      = "cluster-made-no-progress"
	VRetention       = "retention-not-the-clusters"
	VClockAhead      = "cluster-time-ran-ahead"
)

// CheckResult is the verdict on a history.
type CheckResult struct {
	Checked      int // operations given to porcupine
	Scopes       int
	Linearizable porcupine.CheckResult
	Unknown      []string // scopes porcupine could not decide in time
	CheckTime    time.Duration
	Violations   []Violation
	info         porcupine.LinearizationInfo
	infoOK       bool
}

// farFuture is the return time of an operation whose answer was lost: it
// may take effect at any point after its call.
func farFuture(ops []*Op) int64 {
	var m int64
	for _, o := range ops {
		m = max(m, o.Return)
	}
	return m + int64(time.Hour)
}

// porcupineOps converts the history: Fail operations never happened, Info
// lookups constrain nothing, other Info operations stay open forever.
func porcupineOps(ops []*Op) []porcupine.Operation {
	end := farFuture(ops)
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Outcome == Fail || (o.Outcome == Info && o.Kind == KindLookup) {
			continue
		}
		ret := o.Return
		if o.Outcome == Info {
			ret = end
		}
		out = append(out, porcupine.Operation{ClientId: o.Process, Input: o, Output: o, Call: o.Call, Return: ret})
	}
	return out
}

// Check runs porcupine per scope and the invariant checks on ops. timeout
// bounds porcupine on each scope; visualize also computes the whole
// history's linearization info for the HTML timeline.
func Check(ops []*Op, timeout time.Duration, visualize bool) *CheckResult {
	t0 := time.Now()
	res := &CheckResult{Linearizable: porcupine.Ok}
	model := Model()
	pops := porcupineOps(ops)
	res.Checked = len(pops)
	parts := partitionByScope(pops)
	res.Scopes = len(parts)

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for _, p := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			single := model
			single.Partition = nil
			r := porcupine.CheckOperationsTimeout(single, p, timeout)
			if r == porcupine.Ok {
				return
			}
			o := p[0].Input.(*Op)
			mu.Lock()
			defer mu.Unlock()
			if r == porcupine.Unknown {
				res.Unknown = append(res.Unknown, o.Scope())
				if res.Linearizable == porcupine.Ok {
					res.Linearizable = porcupine.Unknown
				}
				return
			}
			res.Linearizable = porcupine.Illegal
			var idsOf []int
			for _, x := range p {
				idsOf = append(idsOf, x.Input.(*Op).ID)
			}
			res.Violations = append(res.Violations, Violation{Kind: VLinearizability, Scope: o.Scope(), At: o.Call,
				Detail: fmt.Sprintf("the %d operations on this scope have no linearization against the model (see timeline.html)", len(p)), Ops: idsOf})
		}()
	}
	wg.Wait()
	sort.Strings(res.Unknown)
	res.Violations = append(res.Violations, invariants(ops)...)
	sort.SliceStable(res.Violations, func(i, j int) bool { return res.Violations[i].At < res.Violations[j].At })
	if visualize {
		_, res.info = porcupine.CheckOperationsVerbose(model, pops, timeout)
		res.infoOK = true
	}
	res.CheckTime = time.Since(t0)
	return res
}

// RetentionChecks finds acknowledged claims whose expires_at - created_at
// is not the cluster's retention: the window a client was promised must
// not depend on which node led when it claimed (a node restarted with its
// own --retention gave its own once it led).
func RetentionChecks(ops []*Op, retention time.Duration) []Violation {
	var out []Violation
	want := retention.Milliseconds()
	for _, o := range ops {
		if o.Kind != KindClaim || o.Status != 201 || o.RetentionMs == 0 || o.RetentionMs == want {
			continue
		}
		out = append(out, Violation{Kind: VRetention, Scope: o.Scope(), At: o.Call, Ops: []int{o.ID},
			Detail: fmt.Sprintf("claimed through %s with a retention of %s; the cluster's is %s", o.Node,
				time.Duration(o.RetentionMs)*time.Millisecond, retention)})
	}
	return out
}

// Slack of ClockChecks: cluster time may run ahead of the harness's clock
// by this much (milliseconds in the answers) plus this fraction of the
// time between the two operations.
const (
	clockSlackMs   = 500
	clockSlackRate = 0.001
)

// ClockChecks finds cluster time moving on faster than real time: two
// acknowledged claims a and b whose cluster times (Op.ClusterMs) are
// further apart than the most real time that can separate their
// decisions, b's return less a's call. Records and leases are kept by
// cluster time, so the records and the leases a granted then ran out that
// much early, in real time, for a client that claimed no sooner than a's
// call: a lease taken over early is a second payment. The rest of the
// checker has no clock (nothing expires within a run), so this is how a
// leader that stamped past ttl.MaxStep after a long pause (the first entry
// decided at the capped time, the next moving cluster time on by the rest
// at once) is seen. Each claim a that is the worst witness of some later
// claim is reported once, with the claim that shows it most.
func ClockChecks(ops []*Op) []Violation {
	type ev struct {
		at  int64 // ns: a's call, or b's return
		key float64
		op  *Op
		b   bool
	}
	// A claim repeated with the same claim_id (its answer lost) is
	// answered the attempt already granted, decided as early as the first
	// call with that claim_id: dated from its own call, it made cluster
	// time look as far ahead as the repeat came late.
	type attempt struct{ scope, claimID string }
	first := map[attempt]int64{}
	for _, o := range ops {
		if o.Kind != KindClaim || o.ClaimID == "" {
			continue
		}
		k := attempt{o.Scope(), o.ClaimID}
		if at, ok := first[k]; !ok || o.Call < at {
			first[k] = o.Call
		}
	}
	var evs []ev
	for _, o := range ops {
		if o.Kind != KindClaim || o.Outcome != OK || o.Status != 201 || o.ClusterMs == 0 {
			continue
		}
		// ms - (1+rate) * real time, in milliseconds.
		key := func(ns int64) float64 { return float64(o.ClusterMs) - (1+clockSlackRate)*float64(ns)/1e6 }
		call := o.Call
		if at, ok := first[attempt{o.Scope(), o.ClaimID}]; ok && o.ClaimID != "" {
			call = min(call, at)
		}
		evs = append(evs, ev{at: call, key: key(call), op: o}, ev{at: o.Return, key: key(o.Return), op: o, b: true})
	}
	// By time, a call before a return at the same instant: a pair needs
	// only a's call at or before b's return.
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return !evs[i].b && evs[j].b
	})
	type found struct {
		b      *Op
		excess float64
		n      int
	}
	worst := map[*Op]*found{} // by witness a
	var order []*Op
	var lo *ev
	for i := range evs {
		e := &evs[i]
		if !e.b {
			if lo == nil || e.key < lo.key {
				lo = e
			}
			continue
		}
		if lo == nil || lo.op == e.op {
			continue
		}
		excess := e.key - lo.key - clockSlackMs
		if excess <= 0 {
			continue
		}
		f := worst[lo.op]
		if f == nil {
			f = &found{}
			worst[lo.op] = f
			order = append(order, lo.op)
		}
		f.n++
		if excess > f.excess {
			f.b, f.excess = e.op, excess
		}
	}
	var out []Violation
	for _, a := range order {
		f := worst[a]
		b := f.b
		moved := time.Duration(b.ClusterMs-a.ClusterMs) * time.Millisecond
		span := time.Duration(b.Return - a.Call)
		early := moved - span
		out = append(out, Violation{Kind: VClockAhead, Scope: a.Scope(), At: a.Call, Ops: []int{a.ID, b.ID},
			Detail: fmt.Sprintf("cluster time moved %s from claim op %d (through %s, decided at %s) to claim op %d (through %s, decided at %s) in at most %s of real time: the record and lease op %d granted run out %s early (%d later claims show it)",
				moved.Round(time.Millisecond), a.ID, a.Node, time.UnixMilli(a.ClusterMs).UTC().Format("15:04:05.000"),
				b.ID, b.Node, time.UnixMilli(b.ClusterMs).UTC().Format("15:04:05.000"), span.Round(time.Millisecond),
				a.ID, early.Round(time.Millisecond), f.n)})
	}
	return out
}

// invariants checks what holds whatever the interleaving, scope by scope.
func invariants(ops []*Op) []Violation {
	var out []Violation
	by := map[string][]*Op{}
	for _, o := range ops {
		by[o.Scope()] = append(by[o.Scope()], o)
	}
	scopes := make([]string, 0, len(by))
	for s := range by {
		scopes = append(scopes, s)
	}
	sort.Strings(scopes)
	for _, s := range scopes {
		out = append(out, scopeInvariants(s, by[s])...)
	}
	return out
}

func scopeInvariants(scope string, ops []*Op) []Violation {
	var out []Violation
	bad := func(kind, detail string, at int64, ids ...int) {
		out = append(out, Violation{Kind: kind, Scope: scope, Detail: detail, At: at, Ops: ids})
	}
	var claims, completes []*Op // acknowledged 201 claims and 200 completes
	for _, o := range ops {
		if o.Outcome != OK {
			continue
		}
		// No answer may show another scope's record or response.
		if o.RecScope != "" && o.RecScope != scope {
			bad(VOtherTenant, fmt.Sprintf("op %d on %s got the record of %s", o.ID, scope, o.RecScope), o.Call, o.ID)
		}
		if o.RecResp != nil && !bytes.HasPrefix(o.RecResp.Body, []byte(scope+"|")) {
			bad(VOtherTenant, fmt.Sprintf("op %d on %s got the response %q", o.ID, scope, o.RecResp.Body), o.Call, o.ID)
		}
		if o.Kind == KindClaim && o.Status == 201 {
			claims = append(claims, o)
		}
		if o.Kind == KindComplete && o.Status == 200 {
			completes = append(completes, o)
		}
		if !expectedStatus(o) {
			bad(VUnexpected, fmt.Sprintf("op %d: %s answered %d %s", o.ID, o.Kind, o.Status, o.Code), o.Call, o.ID)
		}
	}
	for _, o := range ops {
		if o.Outcome != OK {
			continue
		}
		for _, c := range claims {
			if c.Return >= o.Call || c == o {
				continue // not acknowledged before o began
			}
			// The record exists from c on: no 404, no fresh first attempt.
			if o.Status == 404 {
				bad(VEarlyAbsence, fmt.Sprintf("op %d (%s) answered 404 after claim op %d was acknowledged (token %s)", o.ID, o.Kind, c.ID, c.ResToken), o.Call, c.ID, o.ID)
				break
			}
			if o.Kind != KindClaim || o.Status != 201 || o.ResToken == c.ResToken {
				continue
			}
			if o.Attempt == 1 {
				bad(VEarlyAbsence, fmt.Sprintf("claim op %d won attempt 1 (token %s) after claim op %d was acknowledged (token %s)", o.ID, o.ResToken, c.ID, c.ResToken), o.Call, c.ID, o.ID)
				break
			}
			if parseTok(o.ResToken) < parseTok(c.ResToken) {
				bad(VTokenOrder, fmt.Sprintf("claim op %d got token %s after claim op %d got %s", o.ID, o.ResToken, c.ID, c.ResToken), o.Call, c.ID, o.ID)
			}
			if !released(ops, c.ResToken, o.Return) {
				bad(VTwoWinners, fmt.Sprintf("claim op %d won token %s while token %s (claim op %d) was never released", o.ID, o.ResToken, c.ResToken, c.ID), o.Call, c.ID, o.ID)
				break
			}
		}
		// Once a complete is acknowledged, every answer shows its response.
		for _, c := range completes {
			if c.Return >= o.Call || c.RecResp == nil {
				continue
			}
			want := c.RecResp.Body
			switch {
			case o.Kind == KindClaim && o.Status == 201:
				bad(VLostComplete, fmt.Sprintf("claim op %d won a new attempt after complete op %d was acknowledged", o.ID, c.ID), o.Call, c.ID, o.ID)
			case (o.Kind == KindClaim || o.Kind == KindLookup) && o.Status == 200 && (o.RecResp == nil || !bytes.Equal(o.RecResp.Body, want)):
				got := "no response"
				if o.RecResp != nil {
					got = fmt.Sprintf("%q", o.RecResp.Body)
				}
				bad(VLostComplete, fmt.Sprintf("op %d (%s) answered %s after complete op %d stored %q", o.ID, o.Kind, got, c.ID, want), o.Call, c.ID, o.ID)
			default:
				continue
			}
			break
		}
	}
	return out
}

// released reports whether some release of tok may have taken effect
// before t: acknowledged, or with a lost answer.
func released(ops []*Op, tok string, t int64) bool {
	for _, o := range ops {
		if o.Kind == KindRelease && o.Token == tok && o.Call < t && (o.Outcome == Info || (o.Outcome == OK && o.Status == 200)) {
			return true
		}
	}
	return false
}

func expectedStatus(o *Op) bool {
	if o.Status == http.StatusInsufficientStorage && o.Code == "storage_full" {
		return o.Kind != KindLookup // writes only: reads go on on a full disk
	}
	switch o.Kind {
	case KindClaim:
		return o.Status == 201 || o.Status == 200 || (o.Status == 409 && o.Code == "in_progress") || (o.Status == 422 && o.Code == "fingerprint_mismatch")
	case KindComplete, KindRelease, KindExtend:
		return o.Status == 200 || o.Status == 404 || (o.Status == 409 && (o.Code == "token_mismatch" || o.Code == "already_completed"))
	case KindLookup:
		return o.Status == 200 || o.Status == 404
	}
	return false
}

// FinalChecks runs, after healing, a claim (which must replay) and a lookup
// of every scope with an acknowledged complete, recording them in the
// history as Final operations. It returns the scopes it could not reach.
func FinalChecks(ctx context.Context, w *Workload, cl *Cluster, h *History, limit int) (checked int, unreached []string) {
	latest := map[string]*Op{}
	var order []string
	for _, o := range h.Ops() {
		if o.Kind == KindComplete && o.Outcome == OK && o.Status == 200 {
			if _, ok := latest[o.Scope()]; !ok {
				order = append(order, o.Scope())
			}
			latest[o.Scope()] = o
		}
	}
	sort.Strings(order)
	// Contended scopes first, then fresh ones up to limit.
	sort.SliceStable(order, func(i, j int) bool {
		return !strings.Contains(order[i], "|fresh-") && strings.Contains(order[j], "|fresh-")
	})
	if len(order) > limit {
		order = order[:limit]
	}
	proc := h.NewProcess()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, s := range order {
		c := latest[s]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ok := true
			for _, kind := range []string{KindClaim, KindLookup} {
				done := false
				for try := 0; try < 6 && !done && ctx.Err() == nil; try++ {
					op := &Op{Kind: kind, Final: true, Principal: c.Principal, Endpoint: c.Endpoint, Key: c.Key}
					if kind == KindClaim {
						op.Fingerprint, op.ClaimID = c.RecFP, fmt.Sprintf("final-%d-%d", i, try)
					}
					mu.Lock()
					p := proc
					proc = h.NewProcess()
					mu.Unlock()
					live := cl.Live()
					if len(live) == 0 {
						break
					}
					w.Exec(ctx, live[(i+try)%len(live)], op, p)
					h.Add(op)
					done = op.Outcome == OK && op.Status != http.StatusInsufficientStorage
					if !done {
						sleep(ctx, 500*time.Millisecond)
					}
				}
				ok = ok && done
			}
			mu.Lock()
			if ok {
				checked++
			} else {
				unreached = append(unreached, s)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return checked, unreached
}

// Converge polls /v1/admin/state of every node until all report the same
// applied index with the same state hash. Two nodes reporting different
// hashes at the same index is a divergence.
func Converge(ctx context.Context, cl *Cluster, timeout time.Duration) (detail string, v *Violation) {
	type state struct {
		Node    string `json:"node"`
		Hash    string `json:"state_hash"`
		Applied uint64 `json:"applied_index"`
	}
	seen := map[uint64]map[string]string{} // index -> node -> hash
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		states := make([]*state, len(cl.Nodes))
		var wg sync.WaitGroup
		for i, n := range cl.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				var st state
				raw, err := n.Client.Do(rctx, "GET", "/v1/admin/state", nil, nil)
				if err == nil && jsonUnmarshal(raw, &st) == nil {
					states[i] = &st
				}
			}()
		}
		wg.Wait()
		for i, st := range states {
			if st == nil {
				continue
			}
			m := seen[st.Applied]
			if m == nil {
				m = map[string]string{}
				seen[st.Applied] = m
			}
			m[cl.Nodes[i].ID] = st.Hash
			for other, h := range m {
				if h != st.Hash {
					return "", &Violation{Kind: VDiverged, Detail: fmt.Sprintf("at applied index %d %s has state hash %s and %s has %s",
						st.Applied, cl.Nodes[i].ID, short16(st.Hash), other, short16(h))}
				}
			}
			if len(m) == len(cl.Nodes) {
				return fmt.Sprintf("all %d replicas have state hash %s at applied index %d", len(cl.Nodes), short16(st.Hash), st.Applied), nil
			}
		}
		sleep(ctx, 150*time.Millisecond)
	}
	return "", &Violation{Kind: VNotConverged, Detail: fmt.Sprintf("the replicas did not all report one applied index within %s after healing", timeout)}
}

func short16(s string) string {
	if len(s) > 16 {
		return s[:16]
	}
	return s
}

package chaos

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Record kinds of the model.
const (
	absent uint8 = iota
	inProgress
	completed
	failed
)

var kindNames = [...]string{"absent", "in_progress", "completed", "failed"}

// record is the model's state of ONE scope: its idempotency record, or
// absent. No lease or retention runs out during a run (the workload's
// leases are longer than a key is used, and retention is 24h), so the
// model has no clock. It is a comparable value: porcupine needs states it
// can compare and the step function must not mutate them.
type record struct {
	Kind    uint8
	FP      string
	Token   uint64 // 0: an attempt created by a claim whose answer was lost, token not yet seen
	Attempt int
	ClaimID string
	Status  int    // stored response, when completed
	Body    string // stored response body, when completed
	// MaxToken is the greatest token the scope has shown: a new attempt's
	// token must be greater (tokens fence).
	MaxToken uint64
}

func (r record) String() string {
	if r.Kind == absent {
		return "absent"
	}
	s := fmt.Sprintf("%s fp=%s attempt=%d token=%s", kindNames[r.Kind], r.FP, r.Attempt, tokenString(r.Token))
	if r.ClaimID != "" {
		s += " claim_id=" + r.ClaimID
	}
	if r.Kind == completed {
		s += fmt.Sprintf(" response=%d %q", r.Status, r.Body)
	}
	return s
}

func tokenString(t uint64) string {
	if t == 0 {
		return "?"
	}
	return strconv.FormatUint(t, 10)
}

// parseTok reads the raft index a token starts with ("<index>.<MAC>"; a
// bare index from servers before fencing tokens had MACs): tokens of one
// scope order as their indexes.
func parseTok(s string) uint64 {
	index, _, _ := strings.Cut(s, ".")
	t, _ := strconv.ParseUint(index, 10, 64)
	return t
}

// step returns every state the record can be in after op, given that op
// was answered as recorded; none when the answer is impossible. An Info
// operation may or may not have taken effect: both are returned.
func step(s record, op *Op) []record {
	if op.Outcome == Info {
		if n, ok := apply(s, op); ok && n != s {
			return []record{s, n}
		}
		return []record{s}
	}
	if n, ok := check(s, op); ok {
		return []record{n}
	}
	return nil
}

// apply is the effect of op on s when its answer is unknown. ok is false
// when op would change nothing.
func apply(s record, op *Op) (record, bool) {
	tok := parseTok(op.Token)
	switch op.Kind {
	case KindClaim:
		switch {
		case s.Kind == absent:
			return record{Kind: inProgress, FP: op.Fingerprint, Attempt: 1, ClaimID: op.ClaimID, MaxToken: s.MaxToken}, true
		case s.Kind == failed && s.FP == op.Fingerprint:
			n := s
			n.Kind, n.Token, n.Attempt, n.ClaimID = inProgress, 0, s.Attempt+1, op.ClaimID
			return n, true
		}
	case KindComplete:
		if s.Kind == inProgress && s.Token != 0 && s.Token == tok && op.Response != nil {
			n := s
			n.Kind, n.ClaimID, n.Status, n.Body = completed, "", op.Response.Status, string(op.Response.Body)
			return n, true
		}
	case KindRelease:
		if s.Kind == inProgress && s.Token != 0 && s.Token == tok {
			n := s
			n.Kind, n.ClaimID = failed, ""
			return n, true
		}
	}
	return s, false
}

// check is the step of an operation with a definite answer.
func check(s record, op *Op) (record, bool) {
	if op.Status == http.StatusInsufficientStorage && op.Kind != KindLookup {
		// A write refused for the leader's disk: nothing changes.
		return s, op.Code == "storage_full"
	}
	switch op.Kind {
	case KindClaim:
		return checkClaim(s, op)
	case KindComplete, KindRelease, KindExtend:
		return checkToken(s, op)
	case KindLookup:
		if op.Status == 404 {
			return s, s.Kind == absent
		}
		if op.Status != 200 || s.Kind == absent || op.State != kindNames[s.Kind] || op.Attempt != s.Attempt || op.RecFP != s.FP {
			return s, false
		}
		if s.Kind == completed && !sameResponse(s, op.RecResp) {
			return s, false
		}
		return s, true
	}
	return s, false
}

func sameResponse(s record, r *Response) bool {
	return r != nil && r.Status == s.Status && bytes.Equal(r.Body, []byte(s.Body))
}

func checkClaim(s record, op *Op) (record, bool) {
	live := s.Kind != absent
	switch {
	case op.Status == 422:
		return s, live && s.FP != op.Fingerprint
	case op.Status == 409:
		return s, op.Code == "in_progress" && s.Kind == inProgress && s.FP == op.Fingerprint &&
			(op.ClaimID == "" || op.ClaimID != s.ClaimID)
	case op.Status == 200:
		return s, s.Kind == completed && s.FP == op.Fingerprint && op.Attempt == s.Attempt && sameResponse(s, op.RecResp)
	case op.Status != 201:
		return s, false
	}
	tok := parseTok(op.ResToken)
	if tok == 0 {
		return s, false
	}
	n := s
	switch {
	case s.Kind == absent:
		if op.Attempt != 1 || tok <= s.MaxToken {
			return s, false
		}
		n = record{Kind: inProgress, FP: op.Fingerprint, Token: tok, Attempt: 1, ClaimID: op.ClaimID}
	case s.FP != op.Fingerprint:
		return s, false
	case s.Kind == failed:
		if op.Attempt != s.Attempt+1 || tok <= s.MaxToken {
			return s, false
		}
		n.Kind, n.Token, n.Attempt, n.ClaimID = inProgress, tok, s.Attempt+1, op.ClaimID
	case s.Kind == inProgress && op.ClaimID != "" && op.ClaimID == s.ClaimID:
		// The same attempt asked again: the same claim back.
		if op.Attempt != s.Attempt {
			return s, false
		}
		if s.Token == 0 { // learn the token of a claim whose answer was lost
			if tok <= s.MaxToken {
				return s, false
			}
			n.Token = tok
		} else if tok != s.Token {
			return s, false
		}
	default:
		return s, false
	}
	n.MaxToken = max(s.MaxToken, tok)
	return n, true
}

// checkToken checks complete, release and extend, which are decided by the
// token first: absent 404, another token 409 token_mismatch, then by state.
func checkToken(s record, op *Op) (record, bool) {
	tok := parseTok(op.Token)
	if s.Kind == absent {
		return s, op.Status == 404
	}
	if s.Token != tok { // an unknown token (0) is never one a client holds
		return s, op.Status == 409 && op.Code == "token_mismatch"
	}
	n := s
	switch op.Kind {
	case KindComplete:
		switch s.Kind {
		case inProgress:
			if op.Status != 200 || op.Response == nil || !sameResponse(record{Status: op.Response.Status, Body: string(op.Response.Body)}, op.RecResp) {
				return s, false
			}
			n.Kind, n.ClaimID, n.Status, n.Body = completed, "", op.Response.Status, string(op.Response.Body)
			return n, true
		case completed:
			if op.Response != nil && op.Response.Status == s.Status && string(op.Response.Body) == s.Body {
				return s, op.Status == 200 && sameResponse(s, op.RecResp)
			}
			return s, op.Status == 409 && op.Code == "already_completed"
		case failed:
			return s, op.Status == 409 && op.Code == "token_mismatch"
		}
	case KindRelease:
		switch s.Kind {
		case inProgress:
			n.Kind, n.ClaimID = failed, ""
			return n, op.Status == 200
		case failed:
			return s, op.Status == 200
		case completed:
			return s, op.Status == 409 && op.Code == "already_completed"
		}
	case KindExtend:
		switch s.Kind {
		case inProgress:
			return s, op.Status == 200
		case completed:
			return s, op.Status == 409 && op.Code == "already_completed"
		case failed:
			return s, op.Status == 409 && op.Code == "token_mismatch"
		}
	}
	return s, false
}

// Model is the porcupine model of idem: one record per scope, histories
// partitioned by scope. Inputs and outputs are both the *Op.
func Model() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: partitionByScope,
		Init:      func() []any { return []any{record{}} },
		Step: func(state, input, _ any) []any {
			next := step(state.(record), input.(*Op))
			out := make([]any, len(next))
			for i, n := range next {
				out[i] = n
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(record) == b.(record) },
		Hash: func(s any) uint64 {
			h := fnv.New64a()
			fmt.Fprintf(h, "%v", s.(record))
			return h.Sum64()
		},
		DescribeOperation: func(input, _ any) string { return describe(input.(*Op)) },
		DescribeState:     func(s any) string { return s.(record).String() },
	}
	return m.ToModel()
}

func partitionByScope(ops []porcupine.Operation) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	var order []string
	for _, o := range ops {
		s := o.Input.(*Op).Scope()
		if _, ok := by[s]; !ok {
			order = append(order, s)
		}
		by[s] = append(by[s], o)
	}
	sort.Strings(order)
	out := make([][]porcupine.Operation, 0, len(order))
	for _, s := range order {
		out = append(out, by[s])
	}
	return out
}

// describe is one line for the timeline: the request and its answer.
func describe(o *Op) string {
	var req string
	switch o.Kind {
	case KindClaim:
		req = fmt.Sprintf("claim(%s fp=%s cid=%s)", o.Key, short(o.Fingerprint), o.ClaimID)
	case KindComplete:
		req = fmt.Sprintf("complete(%s tok=%s %q)", o.Key, o.Token, respBody(o.Response))
	case KindRelease, KindExtend:
		req = fmt.Sprintf("%s(%s tok=%s)", o.Kind, o.Key, o.Token)
	default:
		req = fmt.Sprintf("lookup(%s)", o.Key)
	}
	return req + " @" + o.Node + " → " + answer(o)
}

func answer(o *Op) string {
	switch {
	case o.Outcome == Info:
		return "? " + o.Error
	case o.Outcome == Fail:
		return "fail " + o.Error
	case o.Status == 201:
		return fmt.Sprintf("201 tok=%s attempt=%d", o.ResToken, o.Attempt)
	case o.Status == 200 && o.Kind == KindLookup:
		s := fmt.Sprintf("200 %s attempt=%d", o.State, o.Attempt)
		if o.RecResp != nil {
			s += fmt.Sprintf(" %q", respBody(o.RecResp))
		}
		return s
	case o.Status == 200 && o.RecResp != nil:
		return fmt.Sprintf("200 %q", respBody(o.RecResp))
	case o.Code != "":
		return fmt.Sprintf("%d %s", o.Status, o.Code)
	}
	return strconv.Itoa(o.Status)
}

func respBody(r *Response) string {
	if r == nil {
		return ""
	}
	return string(r.Body)
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

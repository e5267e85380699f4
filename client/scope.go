package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-store/idem/wire"
)

// sameScope checks that a record an answer hands back (a claim's replay, a
// lookup) is one of the scope asked for. A node only ever answers with the
// record of the scope in the request, so another one comes from something
// between (a cache or proxy that mixed answers up) or a broken node, and
// taking it would replay another key's, or another tenant's, stored
// response to the caller.
//
// The principal and the key are compared exactly: they are part of every
// record's scope. The endpoint is not: with --scope principal a record is
// found by principal and key, and shows the endpoint of its first claim,
// whatever endpoint the request names; the client cannot tell the mode
// (GET /v1/config needs an operator's token).
//
// The error names no value of the record: it may be another tenant's.
func sameScope(rec *Record, principal, key string) error {
	switch {
	case rec.Principal != principal:
		return fmt.Errorf("the answer holds the record of another principal than %q", principal)
	case rec.Key != key:
		return fmt.Errorf("the answer holds the record of another key than %q", key)
	}
	return nil
}

// opScope is what sameScope needs of a batch op: its kind and scope.
type opScope struct {
	Op        string `json:"op"`
	Principal string `json:"principal"`
	Key       string `json:"key"`
}

// checkScopes checks each op's result of a batch, scope(i) giving op i's
// kind and scope: a 2xx result must have the outcome of its op's kind (a
// claim's claimed or replay, a complete's completed...), and the record a
// 200 result of a claim, get or complete holds must be of the op's scope
// (sameScope). One that does not fit makes the whole answer a bad one: the
// results are matched to the ops by place, and once one is known to be
// another op's they are not known to be in the order of the ops, so none
// is taken, not even a won claim's token (which shows no scope to check).
// What does not decode is left to the decoding of each op's result, which
// reports it.
func checkScopes(results []wire.BatchResult, scope func(i int) opScope) error {
	for i, r := range results {
		if r.Status < 200 || r.Status > 599 {
			// No op's answer: a node answers each op 2xx or with a
			// problem of an HTTP status (a status of 0 or 999 made a
			// *Problem, which passed for an outage).
			return fmt.Errorf("op %d answered status %d", i+1, r.Status)
		}
		if r.Status > 299 {
			continue
		}
		op := scope(i)
		if err := resultOutcome(op.Op, r.Body); err != nil {
			return fmt.Errorf("%s op %d: %w", op.Op, i+1, err)
		}
		if r.Status != http.StatusOK {
			continue
		}
		if op.Op != wire.OpClaim && op.Op != wire.OpGet && op.Op != wire.OpComplete {
			continue
		}
		if err := recordScope(r.Body, op.Principal, op.Key); err != nil {
			return fmt.Errorf("%s op %d: %w", op.Op, i+1, err)
		}
	}
	return nil
}

// resultOutcome checks the outcome of an op's 2xx result against the
// op's kind. A get's answer has no outcome, and an op of no known kind is
// not looked at; what does not decode is left to the op's own decoding.
func resultOutcome(op string, body []byte) error {
	var want []string
	switch op {
	case wire.OpClaim:
		want = []string{OutcomeClaimed, OutcomeReplay}
	case wire.OpComplete:
		want = []string{OutcomeCompleted}
	case wire.OpRelease:
		want = []string{OutcomeReleased}
	case wire.OpExtend:
		want = []string{OutcomeExtended}
	default:
		return nil
	}
	for _, w := range want {
		// A node writes the outcome first: most results need no decoding.
		if len(body) > len(w)+13 && string(body[:12]) == `{"outcome":"` && string(body[12:12+len(w)]) == w && body[12+len(w)] == '"' {
			return nil
		}
	}
	var res struct {
		Outcome *string `json:"outcome"`
	}
	if json.Unmarshal(body, &res) != nil {
		return nil
	}
	got := ""
	if res.Outcome != nil {
		got = *res.Outcome
	}
	if slices.Contains(want, got) {
		return nil
	}
	for i, w := range want {
		want[i] = strconv.Quote(w)
	}
	return fmt.Errorf("outcome %q, not %s", got, strings.Join(want, " or "))
}

// recordScope applies sameScope to the record in an op's result body, if
// it holds one; what does not decode is left to the op's own decoding.
func recordScope(body []byte, principal, key string) error {
	// Only the scope, as the op's own decoding reads it.
	var res struct {
		Record *struct {
			Principal string `json:"principal"`
			Key       string `json:"key"`
		} `json:"record"`
	}
	if json.Unmarshal(body, &res) != nil || res.Record == nil {
		return nil
	}
	return sameScope(&Record{Principal: res.Record.Principal, Key: res.Record.Key}, principal, key)
}

// checkBatchScopes is checkScopes for a raw POST /v1/batch (Client.Do):
// the ops are read from body, as sent, and only once a result is not a
// problem (a 2xx, or no HTTP status). An answer with another number of results than the ops is a bad
// one then too: it is not this request's (a cache or proxy that mixed
// answers up), and its records would be taken for the ops at their places.
// What does not decode (the answer, the request's ops, or one op) is left
// to the caller's decoding; the server refuses such an op, with no record.
func checkBatchScopes(body, raw []byte) error {
	results, ok := splitBatchResults(raw)
	if !ok {
		var out wire.BatchResponse
		if json.Unmarshal(raw, &out) != nil {
			return nil
		}
		results = out.Results
	}
	if !slices.ContainsFunc(results, func(r wire.BatchResult) bool { return r.Status < 300 || r.Status > 599 }) {
		return nil
	}
	var req struct {
		Ops []json.RawMessage `json:"ops"`
	}
	if json.Unmarshal(body, &req) != nil || req.Ops == nil {
		return nil
	}
	if len(req.Ops) != len(results) {
		return badAnswer(http.MethodPost, "/v1/batch", fmt.Errorf("%d results for %d ops", len(results), len(req.Ops)))
	}
	ops := make([]opScope, len(req.Ops))
	for i, op := range req.Ops {
		if json.Unmarshal(op, &ops[i]) != nil {
			ops[i] = opScope{} // of no kind: not looked at
		}
	}
	if err := checkScopes(results, func(i int) opScope { return ops[i] }); err != nil {
		return badAnswer(http.MethodPost, "/v1/batch", err)
	}
	return nil
}

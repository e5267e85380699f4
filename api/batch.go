package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/wire"
)

// POST /v1/batch: several operations in one request, each decided exactly
// as if it had been sent alone, in the order given, and answered with the
// status and body its own route would have answered.
//
// Each op is authorized by the single route's own guard (auth.go), run on
// the op as a request of that route, then validated by the route's own
// decoding and checks; a refusal is that op's result alone. The ops that
// write go to the leader together (raftfsm.Node.Batch: one raft entry for
// the lot, refusals and replays from the applied state without one).
//
// Order. Writes are gathered into a group and decided together; a read an
// op needs from the state of its record (a get, or judging a token whose
// MAC does not verify) first has the group decided when an op of the group
// touches that record (same principal and key), so the read sees the
// batch's earlier writes and none of its later ones, exactly as in-order
// single requests would. A read of a record no pending op touches is
// decided at once: nothing in the batch could change its answer. Every
// linearizable read is still a read-barrier read (raftfsm.Node.Lookup).
//
// Leaders. A follower forwards the whole request, as onLeader does for a
// single one. While no write has been decided (reads and answers from the
// state change nothing: asked again, they are answered again), a batch
// that finds no leader waits for one and is tried again (or forwarded)
// whole; once a write has been decided, a later failure is that op's own
// 503 and the others stand. The request answers 503 unavailable as a
// whole when no op could be decided.

// DefaultMaxBatchOps is the default of --max-batch-ops.
const DefaultMaxBatchOps = 256

// smallestBatchOp is the shortest op a batch can decide: a get of
// one-byte principal, endpoint and key (every op names all three; the
// writes carry more).
const smallestBatchOp = `{"op":"get","principal":"p","endpoint":"e","key":"k"}`

// MaxBatchOpsFor is the most ops a batch body of at most maxRequestBytes
// can hold, each op a decidable one (smallestBatchOp), written
// {"ops":[op,op,...]}: a --max-batch-ops above it can never be reached.
func MaxBatchOpsFor(maxRequestBytes int64) int {
	const envelope = int64(len(`{"ops":[]}`) - 1) // the comma after the last op is not written
	n := (maxRequestBytes - envelope) / int64(len(smallestBatchOp)+1)
	return int(max(min(n, int64(math.MaxInt32)), 0))
}

// batchStore is the part of a Store that decides a batch's writes together
// (raftfsm.Node); a Store without it decides them one at a time.
type batchStore interface {
	Batch([]raftfsm.BatchOp) []raftfsm.BatchResult
}

var _ batchStore = (*raftfsm.Node)(nil)

// batchBody is what the server reads of a batch: each op stays raw until
// its own route's decoding reads it, so a malformed op refuses only itself.
type batchBody struct {
	Ops []json.RawMessage `json:"ops"`
}

// batchItem is one op, authorized and validated (or answered: done).
type batchItem struct {
	kind   string
	done   bool
	answer wire.BatchResult

	claim  engine.ClaimArgs
	cred   *Credential // the request's, when it has a principal cap
	target engine.TokenArgs
	token  string
	resp   *engine.Response
	lease  int64
	reason string
	linear bool // a get: linearizable
}

// DefaultMaxBatchAnswerBytes is the default of Config.MaxBatchAnswerBytes.
// A batch answer can be ~350 times its request (256 gets of records with
// 64 KiB responses make 22 MB from 19 KB): clients that send such batches
// and do not read the answers held a gigabyte of this node's memory with
// ten connections. While answers of this many bytes are being made or
// written, a new batch is refused before any op is decided (503,
// Retry-After), an op whose answer would carry a stored response past the
// bound is 503 (runBatch), and an answer not taken within
// Config.BatchAnswerWriteTimeout closes its connection.
const DefaultMaxBatchAnswerBytes = 64 << 20

// DefaultBatchAnswerWriteTimeout is the default of
// Config.BatchAnswerWriteTimeout.
const DefaultBatchAnswerWriteTimeout = 30 * time.Second

func (s *Server) maxBatchAnswerBytes() int64 {
	if s.cfg.MaxBatchAnswerBytes > 0 {
		return s.cfg.MaxBatchAnswerBytes
	}
	return DefaultMaxBatchAnswerBytes
}

func (s *Server) maxBatchOps() int {
	if s.cfg.MaxBatchOps > 0 {
		return s.cfg.MaxBatchOps
	}
	return DefaultMaxBatchOps
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	body, p := s.readBody(w, r)
	var ops []json.RawMessage
	if p == nil {
		ops, p = s.batchOps(body)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	tok := s.answersHeldBy(credentialOf(r))
	if max, total := s.maxBatchAnswerBytes(), s.answering.Load(); total >= max {
		writeProblem(w, answersFull(nil, "nothing was decided"))
		return
	} else if tok.over(0, total, max) {
		writeProblem(w, answersFull(tok, "nothing was decided"))
		return
	}
	releaseOps, p := s.tokenBatchOps(r, len(ops))
	if p != nil {
		writeProblem(w, p)
		return
	}
	defer releaseOps()
	items := make([]batchItem, len(ops))
	for i, raw := range ops {
		items[i] = s.prepareOp(r, raw)
	}
	var results []wire.BatchResult
	var held int64 // of the node's batch answer bytes, until answered
	defer func() { s.answering.Add(-held); tok.add(-held) }()
	if s.onLeader(w, r, body, func() (err error) { results, held, err = s.runBatch(r.Context(), items, tok); return err }) != nil {
		return
	}
	for _, res := range results {
		if res.Status != http.StatusServiceUnavailable {
			s.writeResults(w, results)
			return
		}
	}
	// No op could be decided: the first op's 503 answers the request.
	var p0 problem
	json.Unmarshal(results[0].Body, &p0)
	p0.retryAfter = results[0].RetryAfter
	writeProblem(w, &p0)
}

// answersFull is the 503 of a batch, or of one op, refused because this
// node (tok nil), or the request's token, holds as many bytes of batch
// answers as it may.
func answersFull(tok *tokenHeld, what string) *problem {
	detail := "this node is writing as many batch answers as it holds memory for (clients that are slow to read theirs); " + what + ", retry shortly"
	if tok != nil {
		detail = fmt.Sprintf("the token %q holds its share of the memory this node keeps for batch answers, half of what other tokens leave (its clients are slow to read theirs); %s, retry shortly", tok.name, what)
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable, detail)
	p.retryAfter = 1
	return p
}

// tokenHeld counts the batch answer bytes one app token's requests hold
// (tokenLoad.answers), so that one tenant whose clients do not read (or
// read slowly) can hold at most half of what the others leave of the
// node's --max-batch-answer-bytes (over), and the other tenants' batches
// still go. nil (auth off, or an operator or admin token) counts nothing.
type tokenHeld struct {
	name string
	n    atomic.Int64
}

// answersHeldBy is c's count of batch answer bytes. Operator and admin
// tokens are not tenants, as for the other shares (tokenSlot): an
// old-format file's tokens, admins all, may be every client's, whose
// batches then had half the memory.
func (s *Server) answersHeldBy(c *Credential) *tokenHeld {
	if c == nil || c.Role != RoleApp {
		return nil
	}
	return &s.tokenLoadOf(c.Name).answers
}

func (t *tokenHeld) add(n int64) {
	if t != nil {
		t.n.Add(n)
	}
}

// over reports whether n bytes more would take the token past its share
// of max (at it, for n 0), total being what every request holds: half of
// what the other tokens' requests leave of max. One tenant alone may hold
// half of max; k tenants holding all they may hold 1/(k+1) each, and a
// tenant not among them still has a share (with a fixed half each, two
// tenants whose clients do not read held it all).
func (t *tokenHeld) over(n, total, max int64) bool {
	if t == nil {
		return false
	}
	mine := t.n.Load()
	share := tokenShare(max, mine, total)
	if n == 0 {
		return mine >= share
	}
	return mine+n > share
}

// batchOps reads the request's ops: the whole request is refused only when
// it is not a JSON object of ops, has none, or has too many.
func (s *Server) batchOps(body []byte) ([]json.RawMessage, *problem) {
	ops, ok := fastBatchOps(body)
	if !ok {
		var p *problem
		if ops, p = decodeBatchOps(body); p != nil {
			return nil, p
		}
	}
	if max := s.maxBatchOps(); len(ops) > max {
		return nil, newProblem(http.StatusRequestEntityTooLarge, codeRequestTooLarge,
			fmt.Sprintf("the batch has %d ops; at most %d are taken in one request (--max-batch-ops)", len(ops), max))
	}
	return ops, nil
}

// decodeBatchOps is batchOps' decoder, which words every refusal.
func decodeBatchOps(body []byte) ([]json.RawMessage, *problem) {
	var b batchBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&b)
	if err == nil {
		if p := notObject(body); p != nil {
			return nil, p
		}
		if _, err2 := dec.Token(); err2 != io.EOF {
			return nil, invalid("request body has data after the JSON object")
		}
	}
	if err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, invalid("request body is empty; expected a JSON object with ops")
		case errors.As(err, &te) && te.Field == "ops":
			return nil, invalid("field \"ops\" must be an array of operations, not %s", te.Value)
		case errors.As(err, &te):
			return nil, invalid("request body must be a JSON object with ops, not %s", te.Value)
		default:
			return nil, invalid("request body is not a JSON object of ops: %v", err)
		}
	}
	// encoding/json takes "ops" given twice (the last wins: the ops of the
	// first would go unanswered) and "OPS" or "Ops" as "ops". The envelope
	// is refused for them as a single route's body is (checkRaw), before
	// anything is decided. checkRaw leaves the ops themselves (raw
	// messages) to cutOp and their routes' decoding, so a fault inside one
	// op is still that op's own 400.
	if p := checkRaw(body, batchBodyType); p != nil {
		return nil, p
	}
	if len(b.Ops) == 0 {
		return nil, invalid("ops is empty: a batch needs at least one operation")
	}
	return b.Ops, nil
}

var batchBodyType = reflect.TypeFor[batchBody]()

// fastBatchOps splits a body of exactly the form {"ops":[op,...]} (any
// JSON whitespace) into its ops without encoding/json's reflection, which
// walked the body twice and was ~7% of a node's CPU under batched load.
// It reports false for anything else, and batchOps' decoder then answers
// (and words any error); what it takes, the decoder splits the same way
// (FuzzFastBatchOps).
func fastBatchOps(body []byte) ([]json.RawMessage, bool) {
	if !json.Valid(body) {
		return nil, false
	}
	sc := rawScanner{b: body}
	expect := func(c byte) bool {
		sc.space()
		if sc.i < len(body) && body[sc.i] == c {
			sc.i++
			return true
		}
		return false
	}
	if !expect('{') {
		return nil, false
	}
	sc.space()
	if name, ok := sc.str(); !ok || string(name) != `"ops"` || !expect(':') || !expect('[') {
		return nil, false
	}
	var ops []json.RawMessage
	if !expect(']') {
		for {
			sc.space()
			n := wire.ValueEnd(body[sc.i:])
			if n == 0 {
				return nil, false
			}
			ops = append(ops, json.RawMessage(bytes.TrimRight(body[sc.i:sc.i+n], " \t\r\n")))
			sc.i += n
			if expect(']') {
				break
			}
			if !expect(',') {
				return nil, false
			}
		}
	}
	if !expect('}') {
		return nil, false
	}
	sc.space()
	return ops, sc.i == len(body) && len(ops) > 0
}

// prepareOp authorizes and validates one op as its own route would.
func (s *Server) prepareOp(r *http.Request, raw json.RawMessage) batchItem {
	it := batchItem{}
	refuse := func(p *problem) batchItem {
		rec := newOpRecorder()
		writeProblem(rec, p)
		it.done, it.answer = true, rec.result()
		return it
	}
	kind, rest, p := cutOp(raw)
	if p != nil {
		return refuse(p)
	}
	it.kind = kind
	var get lookupOp
	if kind == wire.OpGet {
		// The members are the lookup's query parameters, read and
		// checked in the order the route reads and checks its query.
		get = readLookupOp(rest)
		if p := repeatedParam(get.q); p != nil {
			return refuse(p)
		}
	}
	if rec := s.authorizeOp(r, kind, rest, get); rec != nil {
		it.done, it.answer = true, rec.result()
		return it
	}
	switch kind {
	case wire.OpClaim:
		var req claimRequest
		if p = decodeClaim(rest, &req); p == nil {
			it.claim, p = s.claimArgs(r, &req)
			it.cred = cappedCredential(r)
		}
	case wire.OpComplete:
		var req completeRequest
		if p = decodeStrict(rest, &req); p == nil {
			it.target, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
			it.token = req.Token
		}
		if p == nil {
			it.resp, p = s.checkResponse(req.Response)
		}
	case wire.OpRelease:
		var req releaseRequest
		if p = decodeStrict(rest, &req); p == nil {
			it.target, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
			it.token, it.reason = req.Token, req.Reason
		}
		if p == nil {
			p = s.checkID("reason", req.Reason)
		}
	case wire.OpExtend:
		var req extendRequest
		if p = decodeStrict(rest, &req); p == nil {
			it.target, p = s.tokenTarget(req.Principal, req.Endpoint, req.Key, req.Token)
			it.token = req.Token
		}
		if p == nil {
			it.lease, p = s.checkLease("lease_ms", req.LeaseMs, true)
		}
	case wire.OpGet:
		p = get.typeErr
		if p == nil {
			var scope engine.Scope
			scope, it.linear, p = s.lookupArgs(get.q, true)
			it.target = engine.TokenArgs{Scope: scope, PrincipalScope: s.cfg.PrincipalScope}
		}
	}
	if p != nil {
		return refuse(p)
	}
	return it
}

// cutOp reads an op's "op" member and returns the op without it: the body
// of that op's route. raw is one element of the envelope, so it is valid
// JSON: a byte scan of its top level is enough (a json.Decoder token walk
// was a tenth of a node's CPU under batched load).
func cutOp(raw json.RawMessage) (string, []byte, *problem) {
	sc := rawScanner{b: raw}
	if !sc.open() {
		return "", nil, invalid("an operation must be a JSON object with an \"op\" member")
	}
	var kind *string
	var cutFrom, cutTo int
	// The other members are skipped, not checked: they are the route's
	// body, checked by its own decoding after the op is authorized, as the
	// route checks them after its guard (a principal outside the token's
	// is 403 even when another member is malformed).
	for first := true; ; first = false {
		m, done, ok := sc.next()
		if done {
			break
		}
		if !ok {
			return "", nil, notJSON()
		}
		if !isOpName(m.name) {
			continue
		}
		if kind != nil {
			return "", nil, invalid("the operation has the member \"op\" more than once")
		}
		var k string
		if json.Unmarshal(raw[m.val:sc.i], &k) != nil {
			return "", nil, invalid("field \"op\" must be a string: claim, complete, release, extend or get")
		}
		kind, cutFrom, cutTo = &k, m.start, sc.i
		if first {
			// The first member: cut the comma after it instead of before.
			rest := rawScanner{b: raw, i: sc.i}
			rest.space()
			if rest.i < len(raw) && raw[rest.i] == ',' {
				cutTo = rest.i + 1
			}
		}
	}
	if kind == nil {
		return "", nil, invalid("the operation has no \"op\" member: claim, complete, release, extend or get")
	}
	switch *kind {
	case wire.OpClaim, wire.OpComplete, wire.OpRelease, wire.OpExtend, wire.OpGet:
	default:
		return "", nil, invalid("op must be claim, complete, release, extend or get (got %q)", truncate(*kind, 40))
	}
	rest := make([]byte, 0, len(raw)-(cutTo-cutFrom))
	rest = append(rest, raw[:cutFrom]...)
	return *kind, append(rest, raw[cutTo:]...), nil
}

// isOpName reports whether a member name (raw, quotes included) is "op",
// as encoding/json reads names: an escaped form ("\u006fp") is "op" too.
// Names with a backslash are rare and take the slow path.
func isOpName(raw []byte) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == `"op"`
	}
	var k string
	return json.Unmarshal(raw, &k) == nil && k == "op"
}

// authorizeOp runs the guard of the op's own route on the op, with the
// batch's credentials; nil when the op may go on, else the guard's answer.
func (s *Server) authorizeOp(r *http.Request, kind string, body []byte, get lookupOp) *opRecorder {
	if s.cfg.Auth == nil {
		return nil
	}
	var req *http.Request
	var guard func(http.HandlerFunc) http.HandlerFunc
	if kind == wire.OpGet {
		if get.principalBad {
			// No principal to judge (not a string): refused with 400 after
			// this, as a body whose principal is not a string is.
			return nil
		}
		q := url.Values{"principal": {get.q.Get("principal")}}
		req, _ = http.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/records?"+q.Encode(), nil)
		guard = s.records
	} else {
		req, _ = http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/"+kind, bytes.NewReader(body))
		guard = s.app
	}
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	allowed := false
	rec := newOpRecorder()
	guard(func(http.ResponseWriter, *http.Request) { allowed = true })(rec, req)
	if allowed {
		return nil
	}
	return rec
}

// lookupOp is a get op read as the query parameters it stands for.
type lookupOp struct {
	q url.Values
	// typeErr refuses a member that is not a string or null (a query
	// parameter has no other type); principalBad says the principal is
	// such a member, so the guard has none to judge.
	typeErr      *problem
	principalBad bool
}

// readLookupOp reads a get op's members (body: one JSON object, the op
// cut) as query parameters: names exactly as written (escapes decoded;
// "Principal" is another parameter, as in a query), a string's bytes as
// they are, so invalid UTF-8 or a lone surrogate escape reaches the
// route's own checks as it would from a query, and null an empty value.
func readLookupOp(body []byte) lookupOp {
	op := lookupOp{q: url.Values{}}
	sc := rawScanner{b: body}
	// body is valid JSON (cutOp's cut of a valid op); a walk that breaks
	// off anyway refuses the op rather than reading past it.
	broken := func() lookupOp {
		return lookupOp{q: url.Values{}, typeErr: notJSON(), principalBad: true}
	}
	if !sc.open() {
		return broken()
	}
	for {
		m, done, ok := sc.next()
		if done {
			return op
		}
		if !ok {
			return broken()
		}
		name := string(jsonBytes(m.name))
		v := body[m.val:sc.i]
		val := ""
		switch v[0] {
		case '"':
			val = string(jsonBytes(v))
		case 'n': // null
		default:
			if op.typeErr == nil {
				kind := "number"
				switch v[0] {
				case 't', 'f':
					kind = "bool"
				case '{':
					kind = "object"
				case '[':
					kind = "array"
				}
				op.typeErr = invalid("field %q must be a string, not %s", truncate(name, 40), kind)
			}
			op.principalBad = op.principalBad || name == "principal"
		}
		op.q[name] = append(op.q[name], val)
	}
}

// jsonBytes is the text of a JSON string token (quotes included, known
// valid): the bytes between the quotes as they are, escapes decoded, and a
// \u escape of a lone surrogate as its WTF-8 bytes (invalid UTF-8, which
// the checks then refuse) rather than U+FFFD, which would make it another,
// valid string.
func jsonBytes(raw []byte) []byte {
	if len(raw) < 2 {
		return nil
	}
	raw = raw[1 : len(raw)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	out := make([]byte, 0, len(raw))
	hex4 := func(i int) rune {
		if i+4 > len(raw) {
			return -1
		}
		n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(i + 1)
			i += 4
			if utf16.IsSurrogate(r) && r < 0xdc00 && i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(i + 3); lo >= 0xdc00 && lo <= 0xdfff {
					out = utf8.AppendRune(out, utf16.DecodeRune(r, lo))
					i += 6
					continue
				}
			}
			if utf16.IsSurrogate(r) {
				out = append(out, byte(0xe0|r>>12), byte(0x80|(r>>6)&0x3f), byte(0x80|r&0x3f))
				continue
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return out
}

// errQueued stops fenced from deciding: the op joins the pending group.
var errQueued = errors.New("api: queued")

// runBatch decides the items in order (see the top of this file). It
// returns an error, and decides nothing, only while no op has been decided
// and the store says this node cannot decide now: onLeader then forwards
// the request, or waits for a leader and runs it again.
//
// Each answer counts against the node's batch answer bytes from when it is
// made (held, which the caller gives back once the answer is written): the
// answers of many batches decided at once, none of them written yet, are
// as much memory as those being written. An answer that would carry a
// stored response (a get's record, a claim's replay) past the bound is
// 503 instead: it decided nothing, and asked again it is the same answer.
func (s *Server) runBatch(ctx context.Context, items []batchItem, tok *tokenHeld) (_ []wire.BatchResult, held int64, err error) {
	if !s.store.IsLeader() {
		for i := range items {
			if it := &items[i]; !it.done && (it.kind != wire.OpGet || it.linear) {
				// Only the leader decides it: the whole batch goes there
				// (onLeader forwards it, or waits for a leader), so no op
				// is decided here before the others are sent on.
				return nil, 0, raftfsm.ErrNotLeader
			}
		}
	}
	defer func() {
		if err != nil {
			s.answering.Add(-held) // tried again whole, or answered 503
			tok.add(-held)
			held = 0
		}
	}()
	out := make([]wire.BatchResult, len(items))
	max := s.maxBatchAnswerBytes()
	keep := func(i int, r wire.BatchResult) {
		n := int64(len(r.Body)) + 48
		total := s.answering.Load()
		if full, tokFull := total+n > max, tok.over(n, total, max); r.Status == http.StatusOK && (full || tokFull) &&
			(items[i].kind == wire.OpGet || items[i].kind == wire.OpClaim) {
			by := tok
			if full {
				by = nil
			}
			rec := newOpRecorder()
			writeProblem(rec, answersFull(by, "this op was not decided"))
			r = rec.result()
			n = int64(len(r.Body)) + 48
		}
		s.answering.Add(n)
		tok.add(n)
		held += n
		out[i] = r
	}
	decided := false
	var pending []int
	var ops []raftfsm.BatchOp
	touched := map[string]bool{}
	answer := func(i int, f func(http.ResponseWriter)) {
		rec := newOpRecorder()
		f(rec)
		keep(i, rec.result())
	}
	failed := func(i int, err error) error {
		if !decided && undecided(err) {
			return err
		}
		answer(i, func(w http.ResponseWriter) { writeProblem(w, s.storeProblem(err)) })
		return nil
	}
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		rs := s.decideBatch(ctx, ops)
		if !decided {
			all := true
			for _, r := range rs {
				all = all && r.Err != nil && undecided(r.Err)
			}
			if all {
				return rs[0].Err
			}
		}
		decided = true
		for j, i := range pending {
			keep(i, s.answerBatchOp(&items[i], rs[j]))
		}
		pending, ops, touched = pending[:0], ops[:0], map[string]bool{}
		return nil
	}
	secretTried := false
	for i := range items {
		it := &items[i]
		if it.done {
			keep(i, it.answer)
			continue
		}
		key := recordKey(it)
		switch it.kind {
		case wire.OpClaim:
			if !secretTried {
				secretTried = true
				if err := s.ensureSecret(ctx); err != nil {
					if err := failed(i, err); err != nil {
						return nil, held, err
					}
					continue
				}
			}
			a := s.claimBound(it.claim)
			ops = append(ops, raftfsm.BatchOp{Op: raftfsm.OpClaim, Claim: &a})
		case wire.OpComplete, wire.OpRelease, wire.OpExtend:
			if touched[key] && !s.macVerifies(it.target.Scope, it.token) {
				// fenced reads the record: the batch's earlier writes first.
				if err := flush(); err != nil {
					return nil, held, err
				}
			}
			var t engine.TokenArgs
			res, err := s.fenced(ctx, it.target, it.token, func(ft engine.TokenArgs) (engine.Result, error) {
				t = ft
				return engine.Result{}, errQueued
			})
			switch {
			case errors.Is(err, errQueued):
			case err != nil:
				if err := failed(i, err); err != nil {
					return nil, held, err
				}
				continue
			default:
				// Answered from the state (a refusal, a replay): nothing
				// changed, so asked again after a lost leader it is
				// answered again; the batch stays undecided.
				keep(i, s.answerBatchOp(it, raftfsm.BatchResult{Result: res}))
				continue
			}
			op := raftfsm.BatchOp{Target: &t}
			switch it.kind {
			case wire.OpComplete:
				op.Op, op.Response = raftfsm.OpComplete, it.resp
			case wire.OpRelease:
				op.Op = raftfsm.OpRelease
			case wire.OpExtend:
				op.Op, op.LeaseMs = raftfsm.OpExtend, it.lease
			}
			ops = append(ops, op)
		case wire.OpGet:
			if touched[key] {
				if err := flush(); err != nil {
					return nil, held, err
				}
			}
			rec, found, err := s.store.Lookup(ctx, it.target.Scope, it.target.PrincipalScope, it.linear)
			if err != nil {
				if err := failed(i, err); err != nil {
					return nil, held, err
				}
				continue
			}
			// A read changes nothing: the batch stays undecided (a later
			// write finding no leader has it asked again whole).
			answer(i, func(w http.ResponseWriter) { answerLookup(w, rec, found) })
			continue
		}
		pending = append(pending, i)
		touched[key] = true
	}
	if err := flush(); err != nil {
		return nil, held, err
	}
	return out, held, nil
}

// undecided reports whether err says the op was certainly not decided and
// this node cannot decide it now: another node may, or a later leader.
func undecided(err error) bool {
	return errors.Is(err, raftfsm.ErrNotLeader) || errors.Is(err, raftfsm.ErrNoLeader) ||
		errors.Is(err, raftfsm.ErrNotProposed)
}

// recordKey names the record an op reads or writes, as raftfsm orders
// them: principal and key (the endpoint aside, which only orders more).
func recordKey(it *batchItem) string {
	s := it.target.Scope
	if it.kind == wire.OpClaim {
		s = it.claim.Scope
	}
	return string(engine.AppendScope(nil, engine.Scope{Principal: s.Principal, Key: s.Key}, true))
}

// decideBatch has the store decide the writes: together when it can.
//
// Claims of one raft entry share its index, and a token is that index with
// a MAC of its scope; without the cluster secret (an upgrade in progress) a
// token is the bare index, so the ops go one entry each, as singles do.
//
// A member of an older version cannot decode a batch entry and would skip
// it for good, so batch entries wait, like the secret, until every member
// says on /healthz that it knows them (batchGate).
func (s *Server) decideBatch(ctx context.Context, ops []raftfsm.BatchOp) []raftfsm.BatchResult {
	if b, ok := s.store.(batchStore); ok && len(ops) > 1 {
		if _, secret, _ := s.store.ClusterSecret(); secret && s.batchEntriesAllowed(ctx) {
			return b.Batch(ops)
		}
	}
	out := make([]raftfsm.BatchResult, len(ops))
	for i, op := range ops {
		r := &out[i]
		switch op.Op {
		case raftfsm.OpClaim:
			r.Result, r.Index, r.Err = s.store.Claim(*op.Claim)
		case raftfsm.OpComplete:
			r.Result, r.Err = s.store.Complete(*op.Target, op.Response)
		case raftfsm.OpRelease:
			r.Result, r.Err = s.store.Release(*op.Target)
		case raftfsm.OpExtend:
			r.Result, r.Err = s.store.Extend(*op.Target, op.LeaseMs)
		}
	}
	return out
}

// answerBatchOp answers a decided write op as its route does.
func (s *Server) answerBatchOp(it *batchItem, r raftfsm.BatchResult) wire.BatchResult {
	rec := newOpRecorder()
	switch {
	case r.Err != nil:
		writeProblem(rec, s.storeProblem(r.Err))
	case it.kind == wire.OpClaim:
		s.answerClaim(rec, it.claim, it.cred, r.Result)
	case it.kind == wire.OpComplete:
		s.answerToken(rec, r.Result, engine.OutcomeCompleted, completedAnswer(rec))
	case it.kind == wire.OpRelease:
		s.answerToken(rec, r.Result, engine.OutcomeReleased, s.releasedAnswer(rec, it.target, it.reason))
	case it.kind == wire.OpExtend:
		s.answerToken(rec, r.Result, engine.OutcomeExtended, extendedAnswer(rec))
	}
	return rec.result()
}

// opRecorder is the http.ResponseWriter an op's answer is written to, by
// the same code that writes its route's answer.
type opRecorder struct {
	h      http.Header
	status int
	buf    bytes.Buffer
}

func newOpRecorder() *opRecorder { return &opRecorder{h: http.Header{}} }

func (o *opRecorder) Header() http.Header { return o.h }

func (o *opRecorder) WriteHeader(code int) {
	if o.status == 0 {
		o.status = code
	}
}

func (o *opRecorder) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	return o.buf.Write(b)
}

func (o *opRecorder) result() wire.BatchResult {
	ra, _ := strconv.Atoi(o.h.Get("Retry-After"))
	return wire.BatchResult{Status: o.status, Body: json.RawMessage(bytes.TrimRight(o.buf.Bytes(), "\n")), RetryAfter: ra}
}

// featureBatch, on /healthz, says this node's Apply knows batch entries.
const featureBatch = "batch-entry"

// batchGate remembers whether every member knows batch entries. A member
// found lacking (an older version, or not answering) is asked again after
// batchGateRetry; meanwhile a batch's ops are proposed one entry each, as
// single requests are. Members are asked again every batchGateRecheck even
// once all knew, so a member of an older version added later stops batch
// entries within that time.
type batchGate struct {
	mu       sync.Mutex
	ok       bool
	checked  time.Time
	checking bool   // one caller asks; the others go on with the last answer
	waiting  string // the members last found lacking, to log each change once
}

// Variables for tests.
var (
	batchGateRetry   = time.Second
	batchGateRecheck = 30 * time.Second
)

// batchEntriesAllowed reports whether the leader may propose batch
// entries: every member of the configuration says it knows them.
func (s *Server) batchEntriesAllowed(ctx context.Context) bool {
	g := &s.batches
	g.mu.Lock()
	wait := batchGateRetry
	if g.ok {
		wait = batchGateRecheck
	}
	if g.checking || (!g.checked.IsZero() && time.Since(g.checked) < wait) {
		ok := g.ok
		g.mu.Unlock()
		return ok
	}
	g.checking = true
	g.mu.Unlock()
	lacking := s.membersLacking(ctx, featureBatch)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ok, g.checked, g.checking = lacking == "", time.Now(), false
	if lacking != g.waiting {
		if lacking != "" {
			s.log.Info("batches are proposed one entry per op until every member answers and runs a version that knows batch entries: these members are down, unreachable, or run an older version", "members", lacking)
		}
		g.waiting = lacking
	}
	return g.ok
}

// noAnswer follows, in membersLacking's list, a member that gave no
// answer: the gates' log lines said "until every member runs a version
// that knows batch entries" of a member that was down, or of a node an
// operator joined before starting it, which sent the reader looking for
// an old release (a chaos soak's careless-operator joins).
const noAnswer = " (no answer)"

// membersLacking names the other members whose /healthz does not list
// feature (an older version, or no answer: marked noAnswer); "" when none. It asks them in
// parallel, within a second. A member that does not answer but was seen
// listing it (at the same HTTP address) is not named: a member that was
// down or cut off made the gates close again at their recheck, and with
// one node of three down every complete storing a header sent twice (two
// Set-Cookie) was refused 503 while the cluster ran on (a client walk).
// One that answers without it (started again on an older version) is,
// and having listed it before, is said at ERROR: a downgrade in place.
func (s *Server) membersLacking(ctx context.Context, feature string) string {
	st, err := s.store.Status()
	if err != nil {
		return "(the configuration could not be read)"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var lacking []string
	var wg sync.WaitGroup
	for _, m := range st.Nodes {
		if m.ID == st.Self.ID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := feature + "\x00" + m.ID + "\x00" + m.HTTPAddr
			has, answered := s.hasFeature(ctx, m.HTTPAddr, feature)
			switch {
			case has:
				s.featured.Store(seen, true)
				return
			case answered:
				_, open := s.opened.Load(feature)
				if _, was := s.featured.LoadAndDelete(seen); was && open {
					// Its entries of this feature, written while it was
					// down, reach it anyway and its release skips them.
					// While a member never listed it the gate kept them
					// out of the log: a rollback then skips nothing.
					s.log.Error("a member that listed a feature now answers without it: it was started again on an earlier release (a downgrade in place), which skips the log entries that need it, so its state may lack writes the others hold; rebuild it on the release the others run (empty data dir and --join)",
						"node", m.ID, "feature", feature)
				}
			default:
				if _, ok := s.featured.Load(seen); ok {
					return
				}
			}
			id := m.ID
			if !answered {
				// Down, cut off, or a member that never was (a join
				// of a node not yet started): not a version to upgrade.
				id += noAnswer
			}
			mu.Lock()
			lacking = append(lacking, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(lacking) == 0 {
		s.opened.Store(feature, true)
	}
	slices.Sort(lacking)
	return strings.Join(lacking, ",")
}

// hasFeature asks the node at addr whether its /healthz lists feature;
// answered is false when it gave no answer of its own (no connection, a
// timeout, a 5xx of something in between).
func (s *Server) hasFeature(ctx context.Context, addr, feature string) (has, answered bool) {
	if addr == "" {
		return false, false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(s.cfg.PeerTLS, addr, "/healthz"), nil)
	if err != nil {
		return false, false
	}
	resp, err := s.fwd.client.Do(req)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return false, false
	}
	return slices.Contains(strings.Split(resp.Header.Get(featuresHeader), ","), feature), true
}

// writeResults answers wire.BatchResponse{Results: results}. The bodies are
// this server's own JSON, so they are written as they are rather than
// checked and compacted again by encoding/json. The answer counts against
// the node's batch answer bytes (runBatch's held, which the caller gives
// back once this returns) until it is written, or until the client has not
// taken it within Config.BatchAnswerWriteTimeout.
func (s *Server) writeResults(w http.ResponseWriter, results []wire.BatchResult) {
	n := 16
	for _, r := range results {
		n += len(r.Body) + 48
	}
	b := make([]byte, 0, n)
	b = append(b, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
		b = append(b, `,"body":`...)
		b = append(b, r.Body...)
		if r.RetryAfter > 0 {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, int64(r.RetryAfter), 10)
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	timeout := s.cfg.BatchAnswerWriteTimeout
	if timeout <= 0 {
		timeout = DefaultBatchAnswerWriteTimeout
	}
	w.Header().Set("Content-Type", "application/json")
	// A length rather than chunks: one write, and the client reads the
	// answer into one buffer of its size.
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	// After WriteHeader, which sends nothing yet, so that this deadline
	// replaces the one every answer gets there (answerWriter).
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
	w.Write(b) // net/http clears the deadline once the answer is flushed
}

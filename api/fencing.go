package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idem-store/idem/engine"
)

// Fencing tokens are "<raft index of the claim, 20 digits>.<hex of a
// 16-byte HMAC-SHA256>", the MAC taken under the cluster secret over the
// record's scope (encoded as its Pebble key is) and the index. So:
//
//   - a token is worthless outside its scope: the MAC of a token of scope
//     A does not verify for scope B, nor for A with another index;
//   - it cannot be guessed from a neighbouring claim's token;
//   - tokens of one scope still order as strings: a later attempt has a
//     larger raft index, and the index comes first, zero-padded.
//
// The MAC is checked on the node that decides (the leader), against its
// applied state, and a token that does not verify is refused without a
// log entry (fenced).
//
// The secret is made by the first claim once every member runs a version
// whose Apply knows the secret's entry (they say so on /healthz): a node
// of an older version would skip that entry and never hold the secret,
// even after its own upgrade. Until then, during a rolling upgrade or on a
// data dir from an older idem, claims return a bare raft index as before.
// A bare index is accepted for the claims made before the secret, and only
// for them (an index below the secret's), so attempts in flight across an
// upgrade can finish.

const (
	tokenIndexDigits = 20
	tokenMACBytes    = 16
	tokenLen         = tokenIndexDigits + 1 + 2*tokenMACBytes
)

// tokenDomain separates these MACs from any other use of the key.
var tokenDomain = []byte("idem fencing token v1\x00")

// FormatToken returns the fencing token of the claim at index on scope s,
// under the cluster secret key. principalOnly is the cluster's scope mode
// (--scope principal): the endpoint is then not part of the scope.
func FormatToken(key []byte, principalOnly bool, s engine.Scope, index uint64) string {
	// By hand, not fmt.Sprintf("%0*d.%x"): one per claim answered.
	b := make([]byte, tokenIndexDigits, tokenLen)
	for i, v := tokenIndexDigits-1, index; i >= 0; i, v = i-1, v/10 {
		b[i] = byte('0' + v%10)
	}
	b = append(b, '.')
	return string(hex.AppendEncode(b, tokenMAC(key, principalOnly, s, index)))
}

func tokenMAC(key []byte, principalOnly bool, s engine.Scope, index uint64) []byte {
	// One MAC per claim answered and per token checked: a keyed HMAC
	// is kept for reuse (hmac.New hashes the key's pads each time).
	m, _ := macs.Get().(*macState)
	if m == nil || !bytes.Equal(m.key, key) {
		m = &macState{key: bytes.Clone(key), h: hmac.New(sha256.New, key)}
	}
	m.h.Reset()
	m.h.Write(tokenDomain)
	m.buf = engine.AppendScope(m.buf[:0], s, principalOnly)
	m.buf = binary.BigEndian.AppendUint64(m.buf, index)
	m.h.Write(m.buf)
	sum := m.h.Sum(make([]byte, 0, sha256.Size))[:tokenMACBytes]
	macs.Put(m)
	return sum
}

// macState is a keyed HMAC and a scratch buffer, pooled by tokenMAC; an
// entry made under another key (the secret changed) is replaced.
type macState struct {
	key []byte
	h   hash.Hash
	buf []byte
}

var macs sync.Pool

// splitToken parses the shape of a token this server issues.
func splitToken(v string) (index uint64, mac []byte, ok bool) {
	if len(v) != tokenLen || v[tokenIndexDigits] != '.' || !allDigits(v[:tokenIndexDigits]) {
		return 0, nil, false
	}
	index, err := strconv.ParseUint(v[:tokenIndexDigits], 10, 64)
	if err != nil || index == 0 {
		return 0, nil, false
	}
	// Lower case only: the server issues lower case, and one spelling per
	// token keeps "compare tokens as strings" true.
	for _, c := range v[tokenIndexDigits+1:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, nil, false
		}
	}
	mac, err = hex.DecodeString(v[tokenIndexDigits+1:])
	return index, mac, err == nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// principalOnly is the scope mode tokens are bound in: the cluster's
// (pinned by its first write, the one that made any token), as records are.
func (s *Server) principalOnly() bool { return s.clusterScope() == "principal" }

// fenced runs do, an operation on the attempt holding token, with the
// token's raft index once the token is known good for t's scope. A token
// that is not (another scope's, a forgery, a bare index that is not the
// current attempt's of before the secret) is refused exactly as a stale
// token is, 404 not_found without a live record and 409 token_mismatch
// with one, decided on the applied state without proposing anything. On a
// follower every path ends in ErrNotLeader, and the request is forwarded
// to the leader, which decides it.
func (s *Server) fenced(ctx context.Context, t engine.TokenArgs, token string,
	do func(engine.TokenArgs) (engine.Result, error)) (engine.Result, error) {
	if s.macVerifies(t.Scope, token) {
		// The secret never changes once set: a MAC that verifies needs no
		// fresher state.
		t.Token, _, _ = splitToken(token)
		return do(t)
	}
	// Judge it on the leader's state after a read barrier, which makes the
	// state hold every entry committed before (the secret, the record)
	// without adding one.
	rec, found, err := s.store.Lookup(ctx, t.Scope, t.PrincipalScope, true)
	if err != nil {
		return engine.Result{}, err
	}
	if s.macVerifies(t.Scope, token) {
		t.Token, _, _ = splitToken(token)
		return do(t)
	}
	if index, ok := s.bareIndex(token); ok && found && rec.Token == index {
		t.Token = index
		return do(t)
	}
	res := engine.Result{NowMs: s.store.NowMs(), Outcome: engine.OutcomeNotFound}
	if found {
		res.Outcome, res.Record = engine.OutcomeTokenMismatch, rec
	}
	return res, nil
}

// macVerifies reports whether token carries a MAC of its index and scope
// sc under the cluster secret.
func (s *Server) macVerifies(sc engine.Scope, token string) bool {
	index, mac, shaped := splitToken(token)
	if !shaped {
		return false
	}
	sec, ok, err := s.store.ClusterSecret()
	return ok && err == nil && hmac.Equal(mac, tokenMAC(sec.Key, s.principalOnly(), sc, index))
}

// bareIndex reads the token of a claim made while the cluster had no
// secret: a bare raft index, good only below the secret's index (every
// claim after the secret has a larger one). The caller also requires it to
// be the token of the record it read after its barrier, so a claim made
// since (the first one after a new secret, say) is never reached by its
// index.
func (s *Server) bareIndex(token string) (uint64, bool) {
	if !allDigits(token) {
		return 0, false
	}
	index, err := strconv.ParseUint(token, 10, 64)
	if err != nil || index == 0 {
		return 0, false
	}
	sec, ok, err := s.store.ClusterSecret()
	if err != nil {
		return 0, false
	}
	return index, !ok || index < sec.Index
}

// writeClaimed answers a won claim with its token: a bare raft index while
// the cluster has no secret.
func (s *Server) writeClaimed(w http.ResponseWriter, rec *engine.Record) {
	sec, ok, err := s.store.ClusterSecret()
	if err != nil {
		// The claim is committed, and repeating it with its claim_id
		// returns it with its token.
		s.log.Error("the cluster secret could not be read to make a claim's token", "error", err)
		p := newProblem(http.StatusServiceUnavailable, codeUnavailable, "the claim's token could not be made; retry the claim (the same claim_id returns the same claim)")
		p.retryAfter = 1
		writeProblem(w, p)
		return
	}
	c := claimed(rec)
	if ok {
		c.Token = FormatToken(sec.Key, s.principalOnly(), engine.Scope{Principal: rec.Principal, Endpoint: rec.Endpoint, Key: rec.Key}, rec.Token)
	}
	if !writeClaimedJSON(w, &c) {
		writeJSON(w, http.StatusCreated, c)
	}
}

// featuresHeader lists, on /healthz, what this node's Apply knows that
// older versions do not; featureSecret is the cluster secret's entry.
const (
	featuresHeader = "X-Idem-Features"
	featureSecret  = "cluster-secret"
)

// withFeatures answers h with features listed in featuresHeader.
func withFeatures(h http.HandlerFunc, features ...string) http.HandlerFunc {
	list := strings.Join(features, ",")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(featuresHeader, list)
		h(w, r)
	}
}

// secretGate decides when the leader may make the cluster secret: once
// every member says on /healthz that it knows the secret's entry. While a
// member does not (or does not answer), it is asked again after a pause,
// and claims return bare raft indexes, as older versions did.
type secretGate struct {
	mu        sync.Mutex
	notBefore time.Time
	waiting   string // the members last found lacking, to log each change once
	checking  bool   // one caller is asking the members
	open      bool   // every member said it knows the secret
}

// secretGateRetry is how long a leader waits before asking members again
// (a variable for tests).
var secretGateRetry = time.Second

// ensureSecret makes sure, on the leader, that the cluster has a secret
// before a claim, when every member can hold one. Otherwise it does
// nothing: a follower's claim is forwarded, and a leader with members of
// an older version hands out bare indexes.
func (s *Server) ensureSecret(ctx context.Context) error {
	if _, ok, err := s.store.ClusterSecret(); ok || err != nil || !s.store.IsLeader() {
		return err
	}
	g := &s.gate
	g.mu.Lock()
	if _, ok, err := s.store.ClusterSecret(); ok || err != nil {
		g.mu.Unlock()
		return err
	}
	if g.open {
		// Every member knows the secret: make it (once; the others wait
		// for it, so none of them hands out a bare index meanwhile).
		defer g.mu.Unlock()
		return s.store.EnsureClusterSecret()
	}
	if g.checking || time.Now().Before(g.notBefore) {
		g.mu.Unlock()
		return nil
	}
	// One caller asks the members, without holding the lock: a member that
	// drops packets takes the whole second, and every claim waited on it.
	g.checking = true
	g.mu.Unlock()
	lacking := s.membersLacking(ctx, featureSecret)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checking = false
	if lacking != "" {
		g.notBefore = time.Now().Add(secretGateRetry)
		if lacking != g.waiting {
			s.log.Info("fencing tokens stay bare raft indexes (no MAC) until every member answers and says it knows the cluster secret: these members are down, unreachable, or run an older version", "members", lacking)
			g.waiting = lacking
		}
		return nil
	}
	g.open = true
	return s.store.EnsureClusterSecret()
}

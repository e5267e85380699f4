package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"

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
// log entry (fenced). Claims decided before the cluster had a secret (a
// data dir from an older idem) returned a bare raft index: such a token is
// still accepted for those claims, and only for them (an index below the
// secret's), so attempts in flight across an upgrade can finish.

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
	return fmt.Sprintf("%0*d.%x", tokenIndexDigits, index, tokenMAC(key, principalOnly, s, index))
}

func tokenMAC(key []byte, principalOnly bool, s engine.Scope, index uint64) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(tokenDomain)
	m.Write(engine.AppendScope(nil, s, principalOnly))
	m.Write(binary.BigEndian.AppendUint64(nil, index))
	return m.Sum(nil)[:tokenMACBytes]
}

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

// verifyToken returns the raft index token stands for when it was issued
// for scope sc: a MAC that verifies under the cluster secret, or a bare
// raft index below the secret's (a claim decided before the cluster had
// one). A bare index is never accepted while the state holds no secret:
// the caller makes sure there is one first (fenced).
func (s *Server) verifyToken(sc engine.Scope, token string) (uint64, bool) {
	sec, ok, err := s.store.ClusterSecret()
	if !ok || err != nil {
		return 0, false
	}
	if index, mac, shaped := splitToken(token); shaped {
		return index, hmac.Equal(mac, tokenMAC(sec.Key, s.principalOnly(), sc, index))
	}
	if !allDigits(token) {
		return 0, false
	}
	index, err := strconv.ParseUint(token, 10, 64)
	return index, err == nil && index > 0 && index < sec.Index
}

// fenced runs do, an operation on the attempt holding token, with the
// token's raft index once the token is known good for t's scope. A token
// that is not (another scope's, a forgery, a bare index issued after the
// cluster had a secret) is refused exactly as a stale token is, 404
// not_found without a live record and 409 token_mismatch with one, decided
// on the applied state without proposing anything. On a follower every
// path ends in ErrNotLeader, and the request is forwarded to the leader,
// which decides it.
func (s *Server) fenced(ctx context.Context, t engine.TokenArgs, token string,
	do func(engine.TokenArgs) (engine.Result, error)) (engine.Result, error) {
	if index, mac, shaped := splitToken(token); shaped {
		// The secret never changes once set: a MAC that verifies needs no
		// fresher state.
		if sec, ok, err := s.store.ClusterSecret(); ok && err == nil &&
			hmac.Equal(mac, tokenMAC(sec.Key, s.principalOnly(), t.Scope, index)) {
			t.Token = index
			return do(t)
		}
	}
	// Judge it on the leader's state: a bare index is good only below the
	// secret's index, so there must be a secret (a one-time entry for a
	// cluster upgraded from an older idem), and the read barrier of a
	// linearizable lookup makes the state hold every entry committed
	// before (the secret, the record) without adding one.
	if err := s.store.EnsureClusterSecret(); err != nil {
		return engine.Result{}, err
	}
	rec, found, err := s.store.Lookup(ctx, t.Scope, t.PrincipalScope, true)
	if err != nil {
		return engine.Result{}, err
	}
	if index, ok := s.verifyToken(t.Scope, token); ok {
		t.Token = index
		return do(t)
	}
	res := engine.Result{NowMs: s.store.NowMs(), Outcome: engine.OutcomeNotFound}
	if found {
		res.Outcome, res.Record = engine.OutcomeTokenMismatch, rec
	}
	return res, nil
}

// writeClaimed answers a won claim with its token.
func (s *Server) writeClaimed(w http.ResponseWriter, rec *engine.Record) {
	sec, ok, err := s.store.ClusterSecret()
	if !ok || err != nil {
		// The claim ensured a secret first, so this is a bug or a read
		// failure: the claim is committed, and repeating it with its
		// claim_id returns it with its token.
		s.log.Error("no cluster secret to make a claim's token", "error", err)
		p := newProblem(http.StatusServiceUnavailable, codeUnavailable, "the claim's token could not be made; retry the claim (the same claim_id returns the same claim)")
		p.retryAfter = 1
		writeProblem(w, p)
		return
	}
	c := claimed(rec)
	c.Token = FormatToken(sec.Key, s.principalOnly(), engine.Scope{Principal: rec.Principal, Endpoint: rec.Endpoint, Key: rec.Key}, rec.Token)
	writeJSON(w, http.StatusCreated, c)
}

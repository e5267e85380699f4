package scale

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/partition"
)

// endpoints of the loaded records: a payment API's idempotent routes.
var endpoints = []string{"POST /v1/payments", "POST /v1/refunds", "POST /v1/payouts", "POST /v1/transfers", "POST /v1/customers/{id}/charges"}

// gen produces loaded records in the loader's key order: bucket by
// bucket, and inside a bucket by principal, endpoint, then key. Keys are
// UUID-shaped (36 bytes) whose leading hex digits are the bucket and a
// sequence number, so they are unique over the store and sorted within a
// (principal, endpoint); the rest is random.
type gen struct {
	rng        *rand.Rand
	width      int64
	retention  int64
	principals []string
	endpoints  []string
	bodyBytes  int
	inProgress int // percent
	nowMs      int64
	sample     []engine.Record // every sampleEvery-th record, for the correctness check
	every      int64
	n          int64
}

func newGen(seed uint64, principals, bodyBytes, inProgressPct int, width, retention, nowMs, total int64) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x5ca1e)), width: width, retention: retention,
		bodyBytes: bodyBytes, inProgress: inProgressPct, nowMs: nowMs, every: max(1, total/200)}
	for i := range principals {
		g.principals = append(g.principals, fmt.Sprintf("acct_%07d", i))
	}
	g.endpoints = slices.Clone(endpoints)
	// Order as the length-prefixed scope encoding sorts.
	enc := func(s string) []byte { return binary.AppendUvarint(nil, uint64(len(s))) }
	slices.SortFunc(g.endpoints, func(a, b string) int {
		return bytes.Compare(append(enc(a), a...), append(enc(b), b...))
	})
	return g
}

// span is a bucket and the expiry window [lo, hi) of its records.
type span struct {
	b      partition.Bucket
	lo, hi int64
	n      int64
}

// liveSpans spreads n records whose expiries are uniform over
// (now, now+retention], as if created over the past retention.
func (g *gen) liveSpans(n int64) []span {
	var out []span
	lo, hi := g.nowMs+1, g.nowMs+g.retention+1
	w := partition.Width(g.width)
	for b := partition.Of(lo, w); b <= partition.Of(hi-1, w); b++ {
		s := span{b: b, lo: max(lo, b.Start(w)), hi: min(hi, b.End(w))}
		out = append(out, s)
	}
	var given int64
	for i := range out {
		out[i].n = n * (out[i].hi - out[i].lo) / (hi - lo)
		given += out[i].n
	}
	out[len(out)-1].n += n - given
	return out
}

// each calls fn with batches of records in key order; fn must not keep
// them.
func (g *gen) each(spans []span, fn func([]engine.Record) error) error {
	buf := make([]engine.Record, 0, 4096)
	for _, s := range spans {
		var seq uint64
		np := int64(len(g.principals))
		for pi, p := range g.principals {
			cp := s.n/np + b2i(int64(pi) < s.n%np)
			ne := int64(len(g.endpoints))
			for ei, e := range g.endpoints {
				ce := cp/ne + b2i(int64(ei) < cp%ne)
				for range ce {
					buf = append(buf, g.record(s, p, e, seq))
					seq++
					if len(buf) == cap(buf) {
						if err := fn(buf); err != nil {
							return err
						}
						buf = buf[:0]
					}
				}
			}
		}
	}
	if len(buf) > 0 {
		return fn(buf)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (g *gen) record(s span, principal, endpoint string, seq uint64) engine.Record {
	var rnd [32]byte
	for i := 0; i < len(rnd); i += 8 {
		binary.LittleEndian.PutUint64(rnd[i:], g.rng.Uint64())
	}
	key := uuidKey(uint32(s.b), uint32(seq), rnd[:8])
	exp := s.lo + g.rng.Int64N(s.hi-s.lo)
	created := exp - g.retention
	r := engine.Record{
		Scope:       engine.Scope{Principal: principal, Endpoint: endpoint, Key: key},
		Fingerprint: hex.EncodeToString(rnd[:]), // a SHA-256 in hex: 64 bytes
		Attempt:     1, Token: 1, CreatedMs: created, ExpiresMs: exp,
	}
	if g.inProgress > 0 && g.rng.IntN(100) < g.inProgress {
		r.State = engine.StateInProgress
		r.ClaimID = "c-" + hex.EncodeToString(rnd[8:16])
		r.LeaseMs = min(created+30_000, exp)
	} else {
		r.State = engine.StateCompleted
		r.CompletedMs = min(created+20+g.rng.Int64N(800), g.nowMs)
		id := "py_" + hex.EncodeToString(rnd[8:20])
		r.Response = &engine.Response{Status: 201, ContentType: "application/json",
			Headers: map[string]string{"Location": "/v1/payments/" + id}, Body: g.body(id, created)}
	}
	g.n++
	if g.n%g.every == 0 {
		g.sample = append(g.sample, r)
	}
	return r
}

const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// body is a JSON payment object of about bodyBytes: fixed field names, a
// random id and amounts, and a random metadata string filling the rest.
func (g *gen) body(id string, created int64) []byte {
	b := make([]byte, 0, g.bodyBytes+64)
	b = append(b, `{"id":"`...)
	b = append(b, id...)
	b = append(b, `","object":"payment","amount":`...)
	b = strconv.AppendInt(b, 100+g.rng.Int64N(1_000_000), 10)
	b = append(b, `,"currency":"usd","status":"succeeded","created":`...)
	b = strconv.AppendInt(b, created/1000, 10)
	b = append(b, `,"metadata":{"order":"`...)
	for len(b) < g.bodyBytes-3 {
		// Ten characters per random word: 6 bits each, folded into alnum.
		for x, i := g.rng.Uint64(), 0; i < 10 && len(b) < g.bodyBytes-3; i, x = i+1, x>>6 {
			b = append(b, alnum[int(x&63)%len(alnum)])
		}
	}
	return append(b, `"}}`...)
}

// uuidKey is "bbbbbbbb-ssss-ssss-rrrr-rrrrrrrrrrrr": the bucket and the
// sequence number in hex (so keys sort in generation order), then random.
func uuidKey(bucket, seq uint32, rnd []byte) string {
	var k [36]byte
	var raw [16]byte
	binary.BigEndian.PutUint32(raw[0:], bucket)
	binary.BigEndian.PutUint32(raw[4:], seq)
	copy(raw[8:], rnd[:8])
	hex.Encode(k[0:8], raw[0:4])
	k[8] = '-'
	hex.Encode(k[9:13], raw[4:6])
	k[13] = '-'
	hex.Encode(k[14:18], raw[6:8])
	k[18] = '-'
	hex.Encode(k[19:23], raw[8:10])
	k[23] = '-'
	hex.Encode(k[24:36], raw[10:16])
	return string(k[:])
}

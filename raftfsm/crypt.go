package raftfsm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/jsonstrict"
)

// Encryption at rest (docs/SECURITY.md). The leader seals every stored
// response and correlation id before proposing, so the raft log, snapshots,
// backups and Pebble hold only ciphertext; Apply stores and compares the
// sealed bytes without a key (docs/DESIGN.md invariant 2), and reads open
// them on the node that answers.
//
// A sealed value is
//
//	0xFF 0x01 len(id) id | salt[16] | nonce[12] | AES-256-GCM(plaintext) | tag[16]
//
// 0xFF never occurs in UTF-8 and the API refuses correlation ids that are
// not UTF-8, so a sealed correlation id is never a plaintext one; a sealed
// response is stored as status 0 (plaintext ones are 100-599) with the
// sealed bytes as its body.
//
// Sealing is deterministic (a SIV construction): salt and nonce are an
// HMAC-SHA256, under a key derived from the master key, of the associated
// data and the plaintext, and the GCM key of each value is derived from the
// master key and that salt. Equal plaintexts of the same field of the same
// (principal, key) under the same key id therefore seal to equal bytes, which
// is what lets Apply compare a repeated complete with the stored response.
// That equality is all it reveals: the associated data (the header with the
// key id, the field, the principal and the key) is in the HMAC, so equal
// values of different records or fields differ. A GCM nonce is reused only
// for an identical message, and a per-value GCM key keeps the number of
// values sealed under one key far from GCM's 2^32 random-nonce limit.

const (
	sealMarker  = 0xFF
	sealVersion = 0x01
	sealSalt    = 16
	sealNonce   = 12
	maxKeyID    = 64
)

// Fields sealed, bound into the associated data so one cannot stand in for
// the other.
const (
	fieldResponse    byte = 'r'
	fieldCorrelation byte = 'c'
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ErrKeyFile is a bad encryption key file: the error says what and where.
var ErrKeyFile = errors.New("raftfsm: bad encryption key file")

// ErrEncryption matches every SealedError.
var ErrEncryption = errors.New("raftfsm: stored value cannot be decrypted")

// SealedError is a stored value this node cannot open: its key is not in the
// node's key ring (Missing), or the value does not authenticate under it.
type SealedError struct {
	KeyID   string
	Field   string // "response" or "correlation id"
	Missing bool
}

func (e *SealedError) Error() string {
	if e.Missing {
		return fmt.Sprintf("raftfsm: the stored %s is encrypted with key %q, which this node's --encryption-key-file does not hold", e.Field, e.KeyID)
	}
	return fmt.Sprintf("raftfsm: the stored %s does not decrypt with key %q (the key with that id is not the one it was written with, or the data was altered)", e.Field, e.KeyID)
}

func (e *SealedError) Unwrap() error { return ErrEncryption }

// MissingKeysError refuses a start: records in the data dir need keys the
// node was not given.
type MissingKeysError struct {
	IDs  []string // needed and missing, sorted
	Have []string // the node's key ids, the first encrypting
	// ExpiredMs, when not 0, is when the last record under those keys
	// expired (cluster time, unix ms), already past by this node's wall
	// clock: the other nodes may have dropped those records, and the key
	// left their key files at rotation step 3, while this node was
	// stopped.
	ExpiredMs int64
}

func (e *MissingKeysError) Error() string {
	q := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		q[i] = fmt.Sprintf("%q", id)
	}
	ids := strings.Join(q, ", ")
	if len(e.Have) == 0 {
		return fmt.Sprintf("raftfsm: this data dir holds records encrypted with key %s, and the node was started without --encryption-key-file: "+
			"start it with a key file that holds %s; nothing was changed", ids, ids)
	}
	msg := fmt.Sprintf("raftfsm: this data dir holds records encrypted with key %s, which --encryption-key-file does not hold (it holds %s): "+
		"add %s to the key file, after the first key (the first encrypts new records, the others only decrypt), and start again; nothing was changed",
		ids, strings.Join(e.Have, ", "), ids)
	if e.ExpiredMs != 0 {
		msg += fmt.Sprintf(". Those records expired at %s (cluster time): if the other nodes have dropped them and the key was removed from their key files "+
			"(key rotation step 3) while this node was stopped, this node's state is older than theirs and needs the key until it has caught up; "+
			"add it back for this start, and remove it again once idem keys status --addr on this node shows no values under it. "+
			"If the key is gone, this node cannot start on this data dir: run idem cluster remove --id for this node on a running member, "+
			"move this data dir aside, and start the node on an empty data dir with --join",
			time.UnixMilli(e.ExpiredMs).UTC().Format(time.RFC3339))
	}
	return msg
}

// Keyring is a node's encryption keys: the first seals new values, every one
// opens values sealed under its id. A nil *Keyring stores plaintext.
type Keyring struct {
	keys []*ringKey
	byID map[string]*ringKey
}

type ringKey struct {
	id     string
	header []byte // marker, version, id: the start of every value it seals
	encKey []byte // derives each value's GCM key
	sivKey []byte // derives each value's salt and nonce
	check  []byte // proves the key without revealing it (keyCheck)
}

// keyCheckSize is the size of a key's check value.
const keyCheckSize = 16

// keyCheck is the check value of a master key: HMAC-SHA256(key, "idem key
// check") truncated to 16 bytes. The replicated state records it per key id
// (keyuse.go), so a key file that holds a known id with other bytes (a key
// regenerated on one node instead of copied) is caught before it seals
// anything, and without the state revealing the key.
func keyCheck(master []byte) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("idem key check"))
	return m.Sum(nil)[:keyCheckSize]
}

// KeyFile is the JSON of --encryption-key-file.
type KeyFile struct {
	Keys []KeyFileEntry `json:"keys"`
}

// KeyFileEntry is one key: an id (kept with every value it seals, for
// rotation) and the base64 of 32 random bytes.
type KeyFileEntry struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

// LoadKeyring reads a key file. It refuses anything but a JSON object of
// keys with distinct valid ids and distinct 32-byte keys.
func LoadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	k, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return k, nil
}

// ParseKeyring parses the JSON of a key file.
func ParseKeyring(b []byte) (*Keyring, error) {
	bad := func(format string, args ...any) (*Keyring, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrKeyFile}, args...)...)
	}
	var f KeyFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return bad(`not {"keys":[{"id":"k1","key":"<base64 of 32 bytes>"}]}: %v`, err)
	}
	if dec.More() {
		return bad("trailing data after the JSON object")
	}
	if err := jsonstrict.DuplicateMember(b); err != nil {
		return bad("%v", err)
	}
	if len(f.Keys) == 0 {
		return bad("no keys")
	}
	kr := &Keyring{byID: map[string]*ringKey{}}
	seen := map[string]string{}
	for i, e := range f.Keys {
		if !keyIDPattern.MatchString(e.ID) {
			// Not quoted: with "id" and "key" swapped the id is a key
			// (base64, perhaps with a stray space or in another
			// alphabet), which an error must not carry to the node's log.
			return bad("key %d: its id (%d bytes, not shown here so that a key given as the id stays out of logs) must be 1-64 letters, digits, '.', '_' or '-' (are \"id\" and \"key\" swapped?)", i+1, len(e.ID))
		}
		if kr.byID[e.ID] != nil {
			return bad("key id %q appears twice", e.ID)
		}
		raw, err := base64.StdEncoding.DecodeString(e.Key)
		if err != nil {
			return bad("key %q is not standard base64: %v", e.ID, err)
		}
		if len(raw) != 32 {
			return bad("key %q is %d bytes; AES-256 needs 32 (make one with idem keys generate)", e.ID, len(raw))
		}
		if other, ok := seen[string(raw)]; ok {
			return bad("keys %q and %q are the same key", other, e.ID)
		}
		seen[string(raw)] = e.ID
		rk, err := newRingKey(e.ID, raw)
		if err != nil {
			return bad("key %q: %v", e.ID, err)
		}
		kr.keys = append(kr.keys, rk)
		kr.byID[e.ID] = rk
	}
	return kr, nil
}

func newRingKey(id string, master []byte) (*ringKey, error) {
	enc, err := hkdf.Key(sha256.New, master, nil, "idem at-rest v1 value keys", 32)
	if err != nil {
		return nil, err
	}
	siv, err := hkdf.Key(sha256.New, master, nil, "idem at-rest v1 synthetic iv", 32)
	if err != nil {
		return nil, err
	}
	h := append([]byte{sealMarker, sealVersion, byte(len(id))}, id...)
	return &ringKey{id: id, header: h, encKey: enc, sivKey: siv, check: keyCheck(master)}, nil
}

// Check returns the check value of key id, or nil when the ring lacks it.
func (k *Keyring) Check(id string) []byte {
	if k == nil || k.byID[id] == nil {
		return nil
	}
	return k.byID[id].check
}

// IDs returns the key ids, the one that encrypts first.
func (k *Keyring) IDs() []string {
	if k == nil {
		return nil
	}
	out := make([]string, len(k.keys))
	for i, rk := range k.keys {
		out[i] = rk.id
	}
	return out
}

// Primary is the id of the key that seals new values ("" without keys).
func (k *Keyring) Primary() string {
	if k == nil || len(k.keys) == 0 {
		return ""
	}
	return k.keys[0].id
}

// Has reports whether the ring opens values sealed under id.
func (k *Keyring) Has(id string) bool { return k != nil && k.byID[id] != nil }

// sealedKeyID returns the key id of a sealed value, or false when b is not
// one. It needs no key: Apply uses it to count values per key id.
func sealedKeyID(b []byte) (string, bool) {
	if len(b) < 3 || b[0] != sealMarker || b[1] != sealVersion {
		return "", false
	}
	n := int(b[2])
	if n == 0 || n > maxKeyID || len(b) < 3+n+sealSalt+sealNonce+16 {
		return "", false
	}
	return string(b[3 : 3+n]), true
}

// aad is what a sealed value is bound to besides its key: its header (so
// the key id cannot be swapped), its field, and the record's principal and
// key (so a value cannot be moved to another tenant's or key's record).
// The endpoint is left out: in principal scope mode the same record is
// addressed whatever endpoint a request names.
func aad(header []byte, field byte, principal, key string) []byte {
	b := make([]byte, 0, len(header)+1+2*binary.MaxVarintLen64+len(principal)+len(key))
	b = append(b, header...)
	b = append(b, field)
	b = binary.AppendUvarint(b, uint64(len(principal)))
	b = append(b, principal...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

func (rk *ringKey) siv(ad, plaintext []byte) []byte {
	m := hmac.New(sha256.New, rk.sivKey)
	m.Write(binary.AppendUvarint(nil, uint64(len(ad))))
	m.Write(ad)
	m.Write(plaintext)
	return m.Sum(nil)[:sealSalt+sealNonce]
}

func (rk *ringKey) gcm(salt []byte) cipher.AEAD {
	m := hmac.New(sha256.New, rk.encKey)
	m.Write(salt)
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return g
}

// seal encrypts plaintext under the primary key.
func (k *Keyring) seal(field byte, principal, key string, plaintext []byte) []byte {
	rk := k.keys[0]
	ad := aad(rk.header, field, principal, key)
	iv := rk.siv(ad, plaintext)
	g := rk.gcm(iv[:sealSalt])
	out := make([]byte, 0, len(rk.header)+len(iv)+len(plaintext)+g.Overhead())
	out = append(out, rk.header...)
	out = append(out, iv...)
	return g.Seal(out, iv[sealSalt:], plaintext, ad)
}

// open decrypts a sealed value of a record's field.
func (k *Keyring) open(field byte, principal, key string, b []byte) ([]byte, error) {
	id, _ := sealedKeyID(b)
	name := "response"
	if field == fieldCorrelation {
		name = "correlation id"
	}
	var rk *ringKey
	if k != nil {
		rk = k.byID[id]
	}
	if rk == nil {
		return nil, &SealedError{KeyID: id, Field: name, Missing: true}
	}
	h := len(rk.header)
	iv := b[h : h+sealSalt+sealNonce]
	ad := aad(rk.header, field, principal, key)
	plain, err := rk.gcm(iv[:sealSalt]).Open(nil, iv[sealSalt:], b[h+len(iv):], ad)
	// A value whose salt and nonce are not the HMAC of its plaintext was
	// not sealed here, and would break the equality Apply relies on.
	if err != nil || subtle.ConstantTimeCompare(rk.siv(ad, plain), iv) != 1 {
		return nil, &SealedError{KeyID: id, Field: name}
	}
	return plain, nil
}

// isSealedResponse reports whether a stored response is a sealed one.
func isSealedResponse(r *engine.Response) bool {
	if r == nil || r.Status != 0 {
		return false
	}
	_, ok := sealedKeyID(r.Body)
	return ok
}

// sealResponse seals status, content type, headers and body as one value.
func (k *Keyring) sealResponse(principal, key string, r *engine.Response) *engine.Response {
	return &engine.Response{Body: k.seal(fieldResponse, principal, key, encodeResponse(r))}
}

// openResponse returns the plaintext of a sealed response.
func (k *Keyring) openResponse(principal, key string, r *engine.Response) (*engine.Response, error) {
	plain, err := k.open(fieldResponse, principal, key, r.Body)
	if err != nil {
		return nil, err
	}
	out, err := decodeResponse(plain)
	if err != nil {
		return nil, &SealedError{KeyID: mustKeyID(r.Body), Field: "response"}
	}
	return out, nil
}

func mustKeyID(b []byte) string { id, _ := sealedKeyID(b); return id }

// encodeResponse is the plaintext that is sealed: deterministic, headers
// sorted, so equal responses seal to equal bytes. Version 2 adds the headers
// stored as arrays after the string headers (n, n×(name, m, m×value)); a
// response without them is still version 1, as earlier builds sealed it.
func encodeResponse(r *engine.Response) []byte {
	n := 16 + len(r.ContentType) + len(r.Body)
	for k, v := range r.Headers {
		n += 4 + len(k) + len(v)
	}
	version := byte(1)
	if len(r.HeaderLists) > 0 {
		version = 2
		for k, vs := range r.HeaderLists {
			n += 4 + len(k)
			for _, v := range vs {
				n += 2 + len(v)
			}
		}
	}
	b := make([]byte, 0, n)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendLen(b, r.ContentType)
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendLen(b, k)
		b = appendLen(b, r.Headers[k])
	}
	if version == 2 {
		names = names[:0]
		for k := range r.HeaderLists {
			names = append(names, k)
		}
		slices.Sort(names)
		b = binary.AppendUvarint(b, uint64(len(names)))
		for _, k := range names {
			b = appendLen(b, k)
			b = binary.AppendUvarint(b, uint64(len(r.HeaderLists[k])))
			for _, v := range r.HeaderLists[k] {
				b = appendLen(b, v)
			}
		}
	}
	return append(b, r.Body...)
}

func appendLen(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decodeResponse(b []byte) (*engine.Response, error) {
	bad := errors.New("raftfsm: sealed response encoding")
	if len(b) < 1 || (b[0] != 1 && b[0] != 2) {
		return nil, bad
	}
	version := b[0]
	b = b[1:]
	u := func() (uint64, bool) {
		v, w := binary.Uvarint(b)
		if w <= 0 {
			return 0, false
		}
		b = b[w:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := u()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	st, ok := u()
	if !ok || st > 999 {
		return nil, bad
	}
	r := &engine.Response{Status: int(st)}
	if r.ContentType, ok = str(); !ok {
		return nil, bad
	}
	nh, ok := u()
	if !ok || nh > uint64(len(b)) {
		return nil, bad
	}
	if nh > 0 {
		r.Headers = make(map[string]string, nh)
		for range nh {
			k, ok1 := str()
			v, ok2 := str()
			if !ok1 || !ok2 {
				return nil, bad
			}
			r.Headers[k] = v
		}
	}
	if version == 2 {
		nl, ok := u()
		if !ok || nl == 0 || nl > uint64(len(b)) {
			return nil, bad
		}
		r.HeaderLists = make(map[string][]string, nl)
		for range nl {
			k, ok1 := str()
			m, ok2 := u()
			if !ok1 || !ok2 || m > uint64(len(b)) {
				return nil, bad
			}
			vs := make([]string, m)
			for j := range vs {
				if vs[j], ok = str(); !ok {
					return nil, bad
				}
			}
			r.HeaderLists[k] = vs
		}
	}
	r.Body = append([]byte{}, b...)
	return r, nil
}

// sealClaim seals a claim's correlation id under the primary key, or
// refuses the claim (sealReady, whose term it returns).
func (n *Node) sealClaim(a *engine.ClaimArgs) (uint64, error) {
	if a.CorrelationID == "" {
		return 0, nil
	}
	term, err := n.sealReady()
	if err != nil {
		return 0, err
	}
	if kr := n.Keyring(); kr != nil {
		a.CorrelationID = string(kr.seal(fieldCorrelation, a.Scope.Principal, a.Scope.Key, []byte(a.CorrelationID)))
	}
	return term, nil
}

// sealComplete returns the response to propose for a complete. A repeat of
// a complete that is already stored must compare equal in Apply, which sees
// only bytes: when this leader's state holds the attempt completed with the
// same response, it proposes the stored bytes themselves. That covers what
// sealing alone cannot: a response stored under another key (before a
// rotation, or by a leader with another primary) or in plaintext (before
// encryption was turned on). A repeat racing the first complete, which this
// state does not show yet, is covered by sealing being deterministic. The
// term is sealReady's.
func (n *Node) sealComplete(t engine.TokenArgs, resp *engine.Response) (*engine.Response, uint64, error) {
	term, err := n.sealReady()
	if err != nil {
		return nil, 0, err
	}
	kr := n.Keyring()
	if kr == nil {
		return resp, term, nil
	}
	if rec, ok := n.db.Lookup(t.Scope, t.PrincipalScope, n.db.Meta().NowMs); ok &&
		rec.State == engine.StateCompleted && rec.Token == t.Token && rec.Response != nil {
		stored := rec.Response
		if isSealedResponse(stored) {
			var err error
			if stored, err = kr.openResponse(rec.Principal, rec.Key, stored); err != nil {
				n.log.Warn("complete: the stored response does not decrypt, so a repeat cannot be recognised", "key-id", mustKeyID(rec.Response.Body), "error", err)
				stored = nil
			}
		}
		if stored != nil && stored.Equal(resp) {
			return rec.Response, term, nil
		}
	}
	return kr.sealResponse(t.Scope.Principal, t.Scope.Key, resp), term, nil
}

// openRecord returns r with its sealed values decrypted (r itself when it
// holds none). Nothing decrypted is written back: the copy is the caller's.
func (n *Node) openRecord(r *engine.Record) (*engine.Record, error) {
	if r == nil {
		return nil, nil
	}
	_, corr := sealedKeyID([]byte(r.CorrelationID))
	resp := isSealedResponse(r.Response)
	if !corr && !resp {
		return r, nil
	}
	out := *r
	if corr {
		p, err := n.Keyring().open(fieldCorrelation, r.Principal, r.Key, []byte(r.CorrelationID))
		if err != nil {
			return nil, err
		}
		out.CorrelationID = string(p)
	}
	if resp {
		p, err := n.Keyring().openResponse(r.Principal, r.Key, r.Response)
		if err != nil {
			return nil, err
		}
		out.Response = p
	}
	return &out, nil
}

// openResult decrypts the record a decision returns. When the caller is
// shown the sealed values (need), a value this node cannot decrypt is an
// error naming its key, never ciphertext; otherwise the values are left
// out and the decision stands (it was committed).
func (n *Node) openResult(op string, r *engine.Record, need bool) (*engine.Record, error) {
	out, err := n.openRecord(r)
	if err == nil {
		return out, nil
	}
	var se *SealedError
	keyID := ""
	if errors.As(err, &se) {
		keyID = se.KeyID
	}
	n.log.Error("cannot decrypt a stored record", "op", op, "key-id", keyID,
		"principal", r.Principal, "endpoint", r.Endpoint, "key", r.Key, "error", err)
	if need {
		return nil, err
	}
	c := *r
	if _, ok := sealedKeyID([]byte(c.CorrelationID)); ok {
		c.CorrelationID = ""
	}
	if isSealedResponse(c.Response) {
		c.Response = nil
	}
	return &c, nil
}

// opened is res with its record decrypted (see openResult).
func (n *Node) opened(op string, res engine.Result, need bool) (engine.Result, error) {
	r, err := n.openResult(op, res.Record, need)
	if err != nil {
		return engine.Result{}, err
	}
	res.Record = r
	return res, nil
}

// Detail says what went wrong for a problem document: the key id and what
// an operator does about it, without the package prefix.
func (e *SealedError) Detail() string {
	if e.Missing {
		return fmt.Sprintf("the stored record is encrypted with key %q, which this node does not hold; an operator must add that key to the node's --encryption-key-file", e.KeyID)
	}
	return fmt.Sprintf("the stored record does not decrypt with this node's key %q (a different key under that id, or altered data); nothing is shown rather than a wrong response", e.KeyID)
}

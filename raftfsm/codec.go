package raftfsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/idem-store/idem/engine"
)

// Log entries are binary: decoding them is on the FSM's single-threaded
// apply path, where JSON cost a sixth of the time. The format:
//
//	byte codecV1, byte op, varint now, varint width, then by op:
//	claim:    flags, principal, endpoint, key, fingerprint, claim_id, correlation_id, varint lease, retention, max keys[, max principals][, credential cap]
//	complete: target, response (uvarint status, content type, uvarint n, n×(name, value) sorted, body)
//	release:  target
//	extend:   target, varint lease
//	delete:   target
//	drop:     uvarint bucket
//	set/remove node: id, raft address, HTTP address
//	set secret: secret bytes
//
// target is flags, principal, endpoint, key, uvarint token; strings are
// uvarint length + bytes; flags bit 0 is principal scope. Entries written as
// JSON (a leading '{') by earlier builds still decode.
//
// codecV2 is codecV1 with one addition: a complete's response carries, after
// its string headers, the headers stored as arrays (uvarint n, n×(name,
// uvarint m, m×value), names sorted). Only a complete with such headers is
// written as codecV2, so every other entry stays readable by earlier builds.
// (0x02 starts a batch entry: batch.go.)
const (
	codecV1 = 0x01
	codecV2 = 0x03
)

// flagMaxPrincipals (claim flags bit 1) says a varint max principals ends
// the claim; entries written before the bound existed lack it and decode
// as unlimited.
const flagMaxPrincipals = 0x02

// flagCredentialCap (claim flags bit 2) says the claim ends with its
// credential's cap: uvarint n, n prefixes (strings), varint max principals
// (engine.ClaimArgs.CredentialPrefixes, CredentialMaxPrincipals). A build
// before it ignores the bit but refuses the trailing bytes, so the leader
// writes it only once every member lists FeatureCredentialCap (Node.capGate).
const flagCredentialCap = 0x04

var errShort = errors.New("truncated")

// Encode returns the log bytes of c.
func (c *Command) Encode() ([]byte, error) {
	b := make([]byte, 0, 192)
	version := byte(codecV1)
	if c.Op == OpComplete && c.Response != nil && len(c.Response.HeaderLists) > 0 {
		version = codecV2
	}
	b = append(b, version, byte(c.Op))
	b = binary.AppendVarint(b, c.NowMs)
	b = binary.AppendVarint(b, c.WidthMs)
	missing := func(what string) error {
		return fmt.Errorf("raftfsm: encode op %d without %s", c.Op, what)
	}
	switch c.Op {
	case OpClaim:
		a := c.Claim
		if a == nil {
			return nil, missing("claim")
		}
		fl := flags(a.PrincipalScope)
		if a.MaxPrincipals != 0 {
			fl |= flagMaxPrincipals
		}
		if a.CredentialMaxPrincipals != 0 {
			fl |= flagCredentialCap
		}
		b = append(b, fl)
		for _, s := range [...]string{a.Scope.Principal, a.Scope.Endpoint, a.Scope.Key, a.Fingerprint, a.ClaimID, a.CorrelationID} {
			b = appendStr(b, s)
		}
		b = binary.AppendVarint(b, a.LeaseMs)
		b = binary.AppendVarint(b, a.RetentionMs)
		b = binary.AppendVarint(b, a.MaxKeys)
		if a.MaxPrincipals != 0 {
			b = binary.AppendVarint(b, a.MaxPrincipals)
		}
		if a.CredentialMaxPrincipals != 0 {
			b = binary.AppendUvarint(b, uint64(len(a.CredentialPrefixes)))
			for _, p := range a.CredentialPrefixes {
				b = appendStr(b, p)
			}
			b = binary.AppendVarint(b, a.CredentialMaxPrincipals)
		}
	case OpComplete:
		if c.Target == nil || c.Response == nil {
			return nil, missing("target and response")
		}
		b = appendTarget(b, c.Target)
		r := c.Response
		b = binary.AppendUvarint(b, uint64(r.Status))
		b = appendStr(b, r.ContentType)
		names := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		b = binary.AppendUvarint(b, uint64(len(names)))
		for _, k := range names {
			b = appendStr(b, k)
			b = appendStr(b, r.Headers[k])
		}
		if version == codecV2 {
			names = names[:0]
			for k := range r.HeaderLists {
				names = append(names, k)
			}
			slices.Sort(names)
			b = binary.AppendUvarint(b, uint64(len(names)))
			for _, k := range names {
				b = appendStr(b, k)
				b = binary.AppendUvarint(b, uint64(len(r.HeaderLists[k])))
				for _, v := range r.HeaderLists[k] {
					b = appendStr(b, v)
				}
			}
		}
		b = binary.AppendUvarint(b, uint64(len(r.Body)))
		b = append(b, r.Body...)
	case OpRelease, OpDelete:
		if c.Target == nil {
			return nil, missing("target")
		}
		b = appendTarget(b, c.Target)
	case OpExtend:
		if c.Target == nil {
			return nil, missing("target")
		}
		b = appendTarget(b, c.Target)
		b = binary.AppendVarint(b, c.LeaseMs)
	case OpDropBucket:
		b = binary.AppendUvarint(b, c.Bucket)
	case OpTick:
	case OpSetNode, OpRemoveNode:
		if c.Node == nil {
			return nil, missing("node")
		}
		b = appendStr(b, c.Node.ID)
		b = appendStr(b, c.Node.RaftAddr)
		b = appendStr(b, c.Node.HTTPAddr)
	case OpSetSecret:
		if len(c.Secret) == 0 {
			return nil, missing("secret")
		}
		b = binary.AppendUvarint(b, uint64(len(c.Secret)))
		b = append(b, c.Secret...)
	case OpSetRetention:
		b = binary.AppendVarint(b, c.RetentionMs)
	case OpKeyCheck:
		if c.KeyCheck == nil {
			return nil, missing("key check")
		}
		b = appendStr(b, c.KeyCheck.ID)
		b = binary.AppendUvarint(b, uint64(len(c.KeyCheck.Check)))
		b = append(b, c.KeyCheck.Check...)
	default:
		return nil, fmt.Errorf("raftfsm: encode unknown op %d", c.Op)
	}
	return b, nil
}

// DecodeCommand parses log bytes. Malformed bytes are an ErrBadCommand,
// identical on every replica.
func DecodeCommand(b []byte) (*Command, error) {
	if len(b) > 0 && b[0] == '{' {
		return decodeJSON(b)
	}
	d := decoder{b: b}
	version := d.byte()
	if version != codecV1 && version != codecV2 {
		return nil, fmt.Errorf("%w: unknown encoding", ErrBadCommand)
	}
	c := &Command{Op: Op(d.byte())}
	if version == codecV2 && c.Op != OpComplete {
		return nil, fmt.Errorf("%w: op %d in the encoding of header lists", ErrBadCommand, c.Op)
	}
	c.NowMs = d.varint()
	c.WidthMs = d.varint()
	switch c.Op {
	case OpClaim:
		fl := d.byte()
		a := &engine.ClaimArgs{PrincipalScope: fl&1 == 1}
		for _, s := range [...]*string{&a.Scope.Principal, &a.Scope.Endpoint, &a.Scope.Key, &a.Fingerprint, &a.ClaimID, &a.CorrelationID} {
			*s = d.str()
		}
		a.LeaseMs, a.RetentionMs, a.MaxKeys = d.varint(), d.varint(), d.varint()
		if fl&flagMaxPrincipals != 0 {
			a.MaxPrincipals = d.varint()
		}
		if fl&flagCredentialCap != 0 {
			n := d.uvarint()
			if n > uint64(len(d.b)) {
				return nil, fmt.Errorf("%w: credential prefix count", ErrBadCommand)
			}
			a.CredentialPrefixes = make([]string, n)
			for i := range a.CredentialPrefixes {
				a.CredentialPrefixes[i] = d.str()
			}
			a.CredentialMaxPrincipals = d.varint()
		}
		c.Claim = a
	case OpComplete:
		c.Target = d.target()
		r := &engine.Response{Status: int(d.uvarint()), ContentType: d.str()}
		if n := d.uvarint(); n > 0 {
			if n > uint64(len(d.b)) {
				return nil, fmt.Errorf("%w: header count", ErrBadCommand)
			}
			r.Headers = make(map[string]string, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				k := d.str()
				r.Headers[k] = d.str()
			}
			if d.err == nil && uint64(len(r.Headers)) != n {
				return nil, fmt.Errorf("%w: repeated header", ErrBadCommand)
			}
		}
		if version == codecV2 {
			n := d.uvarint()
			if n == 0 || n > uint64(len(d.b)) {
				return nil, fmt.Errorf("%w: header list count", ErrBadCommand)
			}
			r.HeaderLists = make(map[string][]string, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				k := d.str()
				m := d.uvarint()
				if m > uint64(len(d.b)) {
					return nil, fmt.Errorf("%w: header list length", ErrBadCommand)
				}
				vs := make([]string, m)
				for j := range vs {
					vs[j] = d.str()
				}
				r.HeaderLists[k] = vs
			}
			if d.err == nil && uint64(len(r.HeaderLists)) != n {
				return nil, fmt.Errorf("%w: repeated header list", ErrBadCommand)
			}
		}
		r.Body = d.bytes()
		c.Response = r
	case OpRelease, OpDelete:
		c.Target = d.target()
	case OpExtend:
		c.Target = d.target()
		c.LeaseMs = d.varint()
	case OpDropBucket:
		c.Bucket = d.uvarint()
	case OpTick:
	case OpSetNode, OpRemoveNode:
		c.Node = &NodeInfo{ID: d.str(), RaftAddr: d.str(), HTTPAddr: d.str()}
	case OpSetSecret:
		c.Secret = d.bytes()
	case OpSetRetention:
		c.RetentionMs = d.varint()
	case OpKeyCheck:
		c.KeyCheck = &KeyCheck{ID: d.str(), Check: d.bytes()}
	default:
		return nil, fmt.Errorf("%w: op %d", ErrBadCommand, c.Op)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: op %d: %w", ErrBadCommand, c.Op, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: op %d: %d trailing bytes", ErrBadCommand, c.Op, len(d.b))
	}
	return c, nil
}

func decodeJSON(b []byte) (*Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	if c.Op < OpClaim || c.Op > OpRemoveNode {
		return nil, fmt.Errorf("%w: op %d", ErrBadCommand, c.Op)
	}
	return &c, nil
}

func flags(principalScope bool) byte {
	if principalScope {
		return 1
	}
	return 0
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTarget(b []byte, t *engine.TokenArgs) []byte {
	b = append(b, flags(t.PrincipalScope))
	b = appendStr(b, t.Scope.Principal)
	b = appendStr(b, t.Scope.Endpoint)
	b = appendStr(b, t.Scope.Key)
	return binary.AppendUvarint(b, t.Token)
}

// decoder reads a command; the first failure sticks and later reads
// return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShort
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) target() *engine.TokenArgs {
	t := &engine.TokenArgs{PrincipalScope: d.byte()&1 == 1}
	t.Scope = engine.Scope{Principal: d.str(), Endpoint: d.str(), Key: d.str()}
	t.Token = d.uvarint()
	return t
}

package raftfsm

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
	"github.com/idem-store/idem/partition"
)

// keyUse counts, per time bucket and key id, the sealed values (responses
// and correlation ids) Apply wrote into the bucket. It is replicated state:
// each count is a named meta value "keyuse/<bucket>/<key id>" written in the
// same batch as the data, and the counts of a bucket go when the bucket is
// dropped. So a node knows at start, from a few small values, which keys its
// records need, and an operator sees when an old key has no record left.
//
// The counts are counts of writes, not of live records: a value replaced
// before its bucket goes (a repeated complete, a takeover with a new
// correlation id, a delete) still counts until the bucket is dropped. That
// keeps Apply to one write per sealed value and never reads a record's old
// value, and it errs the safe way: a key id with a count may have no live
// record left, a key id without one has none. The counts fall to zero at
// the latest one bucket width after the last value sealed under the key
// expires.
//
// The map mirrors the committed values (plus those of the batch being
// applied); Apply updates both, a restore reloads it.
type keyUse struct {
	mu sync.Mutex
	m  map[partition.Bucket]map[string]uint64
	// checks are the check values recorded per key id (OpKeyCheck), named
	// meta values "keycheck/<id>". They are kept for good: an id names one
	// key for the life of the cluster.
	checks map[string][]byte
	// onNew is called (outside Apply's decisions) when a key id first
	// appears, so a node can say it lacks it.
	onNew func(id string)
	// onCheck is called when a check value is recorded, so a node whose key
	// under that id differs can say so.
	onCheck func(id string, check []byte)
	// proposing serializes this node's OpKeyCheck proposals; retryAt
	// (Unix ns) spaces them while a member cannot apply one.
	proposing sync.Mutex
	retryAt   atomic.Int64
	logged    mono.Spacer // refused writes logged
	handOff   mono.Spacer // attempts to hand the leadership over
	warned    mono.Spacer // "no voter holds the key" warnings
	plain     mono.Spacer // "encryption was on, this leader stores plaintext" warnings
}

const (
	keyUsePrefix   = "keyuse/"
	keyCheckPrefix = "keycheck/"
)

func keyUseName(b partition.Bucket, id string) string {
	return fmt.Sprintf("%s%016x/%s", keyUsePrefix, uint64(b), id)
}

// BackupKeyUse is the key use a backup's state records (from
// engine.StreamInfo.Named): the key ids a node restored from it needs.
func BackupKeyUse(named map[string][]byte, width partition.Width) ([]KeyUse, error) {
	vals := map[string][]byte{}
	for name, v := range named {
		if strings.HasPrefix(name, keyUsePrefix) {
			vals[name] = v
		}
	}
	m, err := parseKeyUse(vals)
	if err != nil {
		return nil, err
	}
	k := keyUse{m: m}
	return k.usage(width), nil
}

func parseKeyUse(vals map[string][]byte) (map[partition.Bucket]map[string]uint64, error) {
	m := map[partition.Bucket]map[string]uint64{}
	for name, v := range vals {
		rest := strings.TrimPrefix(name, keyUsePrefix)
		hex, id, ok := strings.Cut(rest, "/")
		b, err := strconv.ParseUint(hex, 16, 64)
		if !ok || err != nil || len(v) != 8 || id == "" {
			return nil, fmt.Errorf("raftfsm: bad key use entry %q", name)
		}
		if m[partition.Bucket(b)] == nil {
			m[partition.Bucket(b)] = map[string]uint64{}
		}
		m[partition.Bucket(b)][id] = binary.BigEndian.Uint64(v)
	}
	return m, nil
}

// load reads the counts from the committed state.
func (k *keyUse) load(db *engine.DB) error {
	vals, err := db.Named(keyUsePrefix)
	if err != nil {
		return fmt.Errorf("raftfsm: read key use: %w", err)
	}
	m, err := parseKeyUse(vals)
	if err != nil {
		return err
	}
	cvals, err := db.Named(keyCheckPrefix)
	if err != nil {
		return fmt.Errorf("raftfsm: read key checks: %w", err)
	}
	checks := map[string][]byte{}
	for name, v := range cvals {
		id := strings.TrimPrefix(name, keyCheckPrefix)
		if id == "" || len(v) != keyCheckSize {
			return fmt.Errorf("raftfsm: bad key check entry %q", name)
		}
		checks[id] = append([]byte(nil), v...)
	}
	k.mu.Lock()
	k.m = m
	k.checks = checks
	onNew, onCheck := k.onNew, k.onCheck
	k.mu.Unlock()
	if onCheck != nil {
		for id, c := range checks {
			onCheck(id, c)
		}
	}
	// A state restored from a snapshot may bring key ids this node has
	// never seen: say so now, not at the first read that fails.
	if onNew != nil {
		for _, u := range k.usage(1) {
			onNew(u.ID)
		}
	}
	return nil
}

// track counts the sealed value a command stored, or forgets a dropped
// bucket. It reads only the command and its result: no key, no clock.
func (k *keyUse) track(txn *engine.Txn, c *Command, res *ApplyResult) {
	switch c.Op {
	case OpClaim:
		if res.Outcome != engine.OutcomeClaimed || res.Record == nil || c.Claim.CorrelationID == "" ||
			res.Record.CorrelationID != c.Claim.CorrelationID {
			return
		}
		if id, ok := sealedKeyID([]byte(c.Claim.CorrelationID)); ok {
			k.add(txn, partition.Of(res.Record.ExpiresMs, txn.Meta().Width), id)
		}
	case OpComplete:
		if res.Outcome != engine.OutcomeCompleted || res.Record == nil || !isSealedResponse(c.Response) {
			return
		}
		k.add(txn, partition.Of(res.Record.ExpiresMs, txn.Meta().Width), mustKeyID(c.Response.Body))
	case OpDropBucket:
		if res.Outcome != engine.OutcomeDropped {
			return
		}
		b := partition.Bucket(c.Bucket)
		k.mu.Lock()
		ids := k.m[b]
		delete(k.m, b)
		k.mu.Unlock()
		for id := range ids {
			txn.DeleteNamed(keyUseName(b, id))
		}
	}
}

func (k *keyUse) add(txn *engine.Txn, b partition.Bucket, id string) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[partition.Bucket]map[string]uint64{}
	}
	first := k.m[b][id] == 0
	for _, ids := range k.m {
		if !first {
			break
		}
		first = ids[id] == 0
	}
	if k.m[b] == nil {
		k.m[b] = map[string]uint64{}
	}
	k.m[b][id]++
	n := k.m[b][id]
	onNew := k.onNew
	k.mu.Unlock()
	txn.SetNamed(keyUseName(b, id), binary.BigEndian.AppendUint64(nil, n))
	if first && onNew != nil {
		onNew(id)
	}
}

// setCheck records the check value of key id unless one is recorded
// already: the first applied stays, on every replica.
func (k *keyUse) setCheck(txn *engine.Txn, id string, check []byte) {
	k.mu.Lock()
	if k.checks == nil {
		k.checks = map[string][]byte{}
	}
	if k.checks[id] != nil {
		k.mu.Unlock()
		return
	}
	c := append([]byte(nil), check...)
	k.checks[id] = c
	onCheck := k.onCheck
	k.mu.Unlock()
	txn.SetNamed(keyCheckPrefix+id, c)
	if onCheck != nil {
		onCheck(id, c)
	}
}

// check returns the recorded check value of key id, or nil.
func (k *keyUse) check(id string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checks[id]
}

// anyCheck reports whether any check value is recorded.
func (k *keyUse) anyCheck() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.checks) > 0
}

// recordedChecks returns a copy of the recorded check values.
func (k *keyUse) recordedChecks() map[string][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string][]byte, len(k.checks))
	for id, c := range k.checks {
		out[id] = c
	}
	return out
}

// inUse returns the key ids stored values are sealed under, sorted.
func (k *keyUse) inUse() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ids []string
	for _, m := range k.m {
		for id, n := range m {
			if n > 0 && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// KeyUse is what the replicated state says of one key id.
type KeyUse struct {
	ID      string
	Values  uint64 // sealed values written into buckets not dropped yet
	Buckets int    // buckets holding them
	// UntilMs is the end of the newest such bucket (cluster time): every
	// value sealed under the key has expired by then, and the sweeper
	// drops the bucket soon after.
	UntilMs int64
}

// usage sums the counts per key id, sorted by id.
func (k *keyUse) usage(width partition.Width) []KeyUse {
	k.mu.Lock()
	defer k.mu.Unlock()
	by := map[string]*KeyUse{}
	for b, ids := range k.m {
		for id, n := range ids {
			u := by[id]
			if u == nil {
				u = &KeyUse{ID: id}
				by[id] = u
			}
			u.Values += n
			u.Buckets++
			if end := b.End(width); end > u.UntilMs {
				u.UntilMs = end
			}
		}
	}
	out := make([]KeyUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b KeyUse) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// KeyUse reports, per key id, the sealed values this replica's state holds.
func (n *Node) KeyUse() []KeyUse { return n.fsm.keys.usage(n.db.Meta().Width) }

// Keyring is the node's encryption key ring (nil: values are stored in
// plaintext).
func (n *Node) Keyring() *Keyring { return n.keyring.Load() }

// checkKeys refuses a start when the state needs a key the node lacks, and
// says so in the log when the node runs without some key it might need.
func (n *Node) checkKeys() error {
	if err := n.fsm.keys.load(n.db); err != nil {
		return err
	}
	var missing []string
	var until int64
	for _, u := range n.KeyUse() {
		if !n.Keyring().Has(u.ID) {
			missing = append(missing, u.ID)
			until = max(until, u.UntilMs)
		}
	}
	if len(missing) > 0 {
		e := &MissingKeysError{IDs: missing, Have: n.Keyring().IDs()}
		// Cluster time follows the nodes' wall clocks (trailing them by
		// any time the whole cluster was down): records whose end is
		// still ahead by this clock are most likely needed still; past
		// it, the rest of the cluster may have dropped them.
		if until != 0 && until <= time.Now().UnixMilli() {
			e.ExpiredMs = until
		}
		return e
	}
	if wrong := n.wrongKeys(); len(wrong) > 0 {
		e := &KeyMismatchError{IDs: wrong}
		recorded := n.fsm.keys.recordedChecks()
		for _, id := range wrong {
			for other, c := range recorded {
				if other != id && hmac.Equal(n.Keyring().Check(id), c) {
					if e.Moved == nil {
						e.Moved = map[string]string{}
					}
					e.Moved[id] = other
				}
			}
		}
		return e
	}
	n.fsm.keys.mu.Lock()
	n.fsm.keys.onNew = func(id string) {
		if !n.Keyring().Has(id) {
			n.log.Error("the leader stores values encrypted with a key this node does not hold: reads of them on this node fail until it is added to --encryption-key-file", "key-id", id)
		}
	}
	n.fsm.keys.onCheck = func(id string, check []byte) {
		if own := n.Keyring().Check(id); own != nil && !hmac.Equal(own, check) {
			n.log.Error("this node's key under an id the cluster uses is not the cluster's key (its check value differs): values sealed under that id do not decrypt here, and this node refuses to seal with it while it leads; "+
				"copy the key file the other nodes use to this node and restart it (never regenerate a key that is in use)", "key-id", id)
		}
	}
	n.fsm.keys.mu.Unlock()
	if kr := n.Keyring(); kr != nil {
		n.log.Info("encryption at rest is on", "encrypt-key-id", kr.Primary(), "key-ids", strings.Join(kr.IDs(), ","))
	}
	return nil
}

// wrongKeys returns, sorted, the ids of the node's keys whose check value
// differs from the one the state records under that id.
func (n *Node) wrongKeys() []string {
	var wrong []string
	for id, c := range n.fsm.keys.recordedChecks() {
		if own := n.Keyring().Check(id); own != nil && !hmac.Equal(own, c) {
			wrong = append(wrong, id)
		}
	}
	slices.Sort(wrong)
	return wrong
}

// KeyMismatchError refuses a start: the node's key file holds a key id the
// cluster uses with other key bytes (a key generated on this node under an
// id another node generated too, an edited file, another cluster's file).
type KeyMismatchError struct {
	IDs []string // sorted
	// Moved maps an id of IDs to the id the cluster records this node's key
	// under, where it does (ids swapped or renamed in the file): a check
	// value proves the key, whatever its id.
	Moved map[string]string
}

func (e *KeyMismatchError) Error() string {
	const copyIt = "Copy the key file the other nodes use to this node and start again; "
	const fix = copyIt + "a key file is generated once and the same file is copied to every node (never run idem keys generate for an id in use); nothing was changed"
	q := make([]string, len(e.IDs))
	var moved []string
	for i, id := range e.IDs {
		q[i] = fmt.Sprintf("%q", id)
		if to, ok := e.Moved[id]; ok {
			moved = append(moved, fmt.Sprintf("its key %q is the cluster's key %q", id, to))
		}
	}
	if len(moved) == len(e.IDs) {
		return fmt.Sprintf("raftfsm: --encryption-key-file holds the cluster's keys under other ids: %s (ids swapped or renamed in the file). %snothing was changed",
			strings.Join(moved, ", "), copyIt)
	}
	also := ""
	if len(moved) > 0 {
		also = " (" + strings.Join(moved, ", ") + ")"
	}
	return fmt.Sprintf("raftfsm: --encryption-key-file holds key %s, but not the key the cluster recorded under that id (its check value differs)%s: "+
		"a key generated or edited under an id in use, or another cluster's key file. %s", strings.Join(q, ", "), also, fix)
}

// SealRefusedError is a write the leader refused rather than store a value
// that the other nodes could not read, or in plaintext in an encrypted
// cluster. Nothing was proposed: the client may retry (another leader may
// hold the right key).
type SealRefusedError struct {
	// KeyID is the key the leader would seal with, whose check value
	// differs from the one recorded under its id (Mismatch); or, when the
	// leader holds no key file, InUse are the key ids stored values are
	// encrypted with.
	KeyID    string
	Mismatch bool
	InUse    []string
	// Unrecorded: Mismatch while no check value is recorded under KeyID:
	// the leader's key is not the one most voters holding the id have.
	// Split: no key under the id is held by most of them either (each
	// node generated its own): no voter can seal with it.
	Unrecorded, Split bool
	// Few: the leader's sealing key KeyID is held by too few voters
	// (Holders of Voters): values sealed under it would be unreadable to
	// most of the cluster (keyOnFew).
	Few             bool
	Holders, Voters int
	// Unmeasured: Few, for a key nothing is sealed under yet, before this
	// leader has seen its voters' keys.
	Unmeasured bool
	// Turning: no value is encrypted yet, but most voters hold the keys
	// InUse and this leader holds none (turning encryption on).
	Turning bool
	// forReads: the leader can seal, but lacks the keys InUse that stored
	// values are sealed under (keyHandOff), so reads of them fail.
	forReads bool
}

func (e *SealRefusedError) Error() string { return "raftfsm: write refused: " + e.Detail() }

func (e *SealRefusedError) Unwrap() error { return ErrNotProposed }

// Detail says why, for a problem document.
func (e *SealRefusedError) Detail() string {
	if e.Few && e.Unmeasured {
		return fmt.Sprintf("the leader would encrypt with key %q for the first time and has not yet seen which voters hold it (it was elected a moment ago); nothing was stored; retry shortly", e.KeyID)
	}
	if e.Few {
		return fmt.Sprintf("the leader would encrypt with key %q, which only %d of the cluster's %d voters hold: the others could not read what it stored if it failed, so it refuses; nothing was stored. "+
			"Give every node a key file listing that key before making it the first (rotation step 1), or move the leadership away; retry shortly", e.KeyID, e.Holders, e.Voters)
	}
	if e.Turning {
		return fmt.Sprintf("most of the cluster's voters hold an --encryption-key-file (key %s) and the leader holds none, so it refuses to store this value in plaintext; nothing was stored. "+
			"The leadership moves to a voter holding the key; retry shortly", strings.Join(e.InUse, ", "))
	}
	if e.Split {
		return fmt.Sprintf("the voters hold different keys under id %q (each node generated its own instead of one file copied to all), so none may encrypt with it; nothing was stored. "+
			"An operator must make the key once, copy the same key file to every node and restart them (or put back the key that was first before); this does not pass by retrying", e.KeyID)
	}
	if e.Mismatch && e.Unrecorded {
		return fmt.Sprintf("the leader's key %q is not the key most voters hold under that id, so it refuses to store values they could not read; nothing was stored. "+
			"The leadership moves to a voter holding theirs; retry shortly. An operator must copy the cluster's key file to that node", e.KeyID)
	}
	if e.Mismatch {
		return fmt.Sprintf("the leader's key %q is not the key the cluster recorded under that id, so it refuses to store values nobody else could read; nothing was stored. "+
			"An operator must copy the cluster's key file to that node (or move the leadership away); retry shortly", e.KeyID)
	}
	return fmt.Sprintf("the cluster's stored values are encrypted (key %s) and the leader holds no --encryption-key-file, so it refuses to store this value in plaintext; nothing was stored. "+
		"An operator must give that node the cluster's key file (or move the leadership away); retry shortly", strings.Join(e.InUse, ", "))
}

// sealReady is asked before a leader seals a value: it refuses (a
// SealRefusedError) when the node holds no key while stored values are
// encrypted, or when its sealing key is not the one recorded under its id.
// The first leader to seal under an id the state records no check value
// for records its own (OpKeyCheck), once every member can apply it.
//
// It returns the term the check holds for, 0 when none was made. Only a
// leader checks, and only once its term's barrier has applied what earlier
// leaders committed (a new leader's state may lack the first sealed value,
// or the recorded check value, until then). A follower runs a client's
// write before it forwards it (api's onLeader), so the node may lead by
// the time it proposes, in a term it never checked in: propose checks
// again (sealBound) unless the term is still the one returned here.
func (n *Node) sealReady() (uint64, error) {
	term, err := n.sealCheck()
	if h := sealCheckHook.Load(); h != nil && err == nil {
		(*h)(n)
	}
	return term, err
}

func (n *Node) sealCheck() (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, nil // propose says ErrNotLeader, or checks in the term it leads
	}
	term := n.term()
	if err := n.termBarrier(); err != nil || n.barrierTerm.Load() != term {
		return 0, nil // propose fails the same way, or checks in its term
	}
	if err := n.sealRefusal(true); err != nil {
		n.logRefusal(err)
		return 0, err
	}
	return term, nil
}

// sealCheckHook, when set (tests only), runs when sealReady lets a write
// through: a test moves the leadership between the check and the proposal.
var sealCheckHook atomic.Pointer[func(*Node)]

// sealBound is called by propose after the term's barrier: a command that
// seals a value (or would store it in plaintext) is proposed only in the
// term sealReady passed it in, checking it again now when that was another
// term or none. What is left open is the few instructions between its
// last look at the term and raft.Apply (hashicorp/raft takes no expected
// term): the node would have to lose the leadership and win it again
// there, two elections, for the write to go in under a check of the term
// before. A keyed node's verdict would not change (a recorded check value
// stays for good); a keyless one's could, if the leader between sealed
// the cluster's first value.
func (n *Node) sealBound(c *Command) error {
	if !c.sealsValue() {
		return nil
	}
	if c.sealTerm == 0 || c.sealTerm != n.term() {
		term, err := n.sealReady()
		if err != nil {
			return err
		}
		c.sealTerm = term
	}
	if c.sealTerm == 0 || c.sealTerm != n.term() {
		return n.leadershipMoved("the write")
	}
	return nil
}

// leadershipMoved is the error of a write checked in another term than
// this node's (or never): nothing was proposed, and the client retries.
func (n *Node) leadershipMoved(what string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	return fmt.Errorf("%w: %w: the leadership changed while %s was checked", ErrNoLeader, ErrNotProposed, what)
}

// sealRefusal says why this leader must not seal now, or nil: it holds no
// key while the cluster's values are encrypted (neededKeys), or its
// sealing key is not the one recorded under its id, or, none being
// recorded yet, not the one most voters holding the id have. With record,
// it records its key's check value when none is (recordKeyCheck).
func (n *Node) sealRefusal(record bool) *SealRefusedError {
	kr := n.Keyring()
	if kr == nil {
		if ids := n.neededKeys(); len(ids) > 0 {
			return &SealRefusedError{InUse: ids}
		}
		if v, _ := n.voterKeys(); len(v.most) > 0 {
			return &SealRefusedError{InUse: v.most, Turning: true}
		}
		return nil
	}
	id := kr.Primary()
	own := kr.Check(id)
	rec := n.fsm.keys.check(id)
	if rec == nil && record {
		rec, _ = n.recordKeyCheck(id, own) // an error (no quorum) comes back from propose
	}
	switch {
	case rec != nil && !hmac.Equal(rec, own):
		return &SealRefusedError{KeyID: id, Mismatch: true}
	case rec == nil && !n.heldByMost(id, own):
		_, split := n.majorityCheck(id)
		return &SealRefusedError{KeyID: id, Mismatch: true, Unrecorded: true, Split: split}
	}
	switch v, seen := n.voterKeys(); {
	case seen && v.few && v.id == id:
		return &SealRefusedError{KeyID: id, Few: true, Holders: v.holders, Voters: v.voters}
	case !seen && !slices.Contains(n.fsm.keys.inUse(), id):
		// A new leader has not seen its voters' keys yet (its first health
		// round): it seals under a key values are already sealed under,
		// but not under a new one, which might be on this node alone,
		// unless the voters it knows hold it are enough (a one-node store).
		if _, _, few := n.keyOnFew(id, own); few {
			return &SealRefusedError{KeyID: id, Few: true, Unmeasured: true}
		}
	}
	return nil
}

// voterKeysView is what the leader's health loop last saw of the voters'
// keys (noteVoterKeys), for the write path, which then takes no lock of
// the health checks nor reads the configuration.
type voterKeysView struct {
	term            uint64
	most            []string // keysOfMost: for a keyless leader
	id              string   // this leader's sealing key, and whether it is on few voters (keyOnFew)
	few             bool
	holders, voters int
}

// voterKeys is the view of this term, and whether there is one yet (the
// term's first health round noted it).
func (n *Node) voterKeys() (voterKeysView, bool) {
	if v := n.keyView.Load(); v != nil && v.term == n.term() {
		return *v, true
	}
	return voterKeysView{}, false
}

// noteVoterKeys, run by the leader's health loop after its checks of the
// round, stores the view voterKeys returns.
func (n *Node) noteVoterKeys() {
	v := voterKeysView{term: n.term()}
	if kr := n.Keyring(); kr == nil {
		v.most = n.keysOfMost()
	} else {
		v.id = kr.Primary()
		v.holders, v.voters, v.few = n.keyOnFew(v.id, kr.Check(v.id))
	}
	n.keyView.Store(&v)
}

// keyOnFew reports whether this leader's sealing key id (check value c)
// is held by so few voters that the others are a quorum without it (they
// could elect a leader that cannot read what this one seals). A voter not
// seen this term counts as a holder only of a key values are sealed under
// already (they were sealed once voters were seen to hold it), not of a
// new one: with one down (a rolling restart), counting it let
// a leader seal under a new key only it held, and the two others were a
// quorum that could not read it (a review); counting it as lacking a key in
// use refused every write whenever the leader's health checks failed (its
// peers' HTTP API unreachable, their node token refused) while raft
// replicated (another review). A node
// whose key file lists the new key first while the others lack it (a
// rotation's step 1 skipped on them) sealed values only it could read:
// once it failed, the others answered them 500 and refused to start again
// (an attack on encryption at rest).
func (n *Node) keyOnFew(id string, c []byte) (holders, voters int, few bool) {
	n.peers.mu.Lock()
	v := n.voterChecksLocked(id, c)
	n.peers.mu.Unlock()
	// A voter of a release that does not report its keys is trusted to
	// hold it, as that release trusted every member (refused, every write
	// of a rolling upgrade from it failed).
	held := v.same + v.silent
	if slices.Contains(n.fsm.keys.inUse(), id) {
		held += v.unseen
	}
	return v.same, v.voters, v.voters-held >= v.voters/2+1
}

// keysOfMost returns, for a keyless leader, the ids of the keys held by
// more than half of the voters (as this term's health checks saw them):
// encryption is being turned on, and this leader must not store plaintext
// on nodes that hold a key, nor stay leader (an attack on encryption at
// rest: a keyless leader kept writing plaintext into the keyed nodes'
// logs, with no warning, although the docs said it hands over).
func (n *Node) keysOfMost() []string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	term := n.term()
	voters := 0
	count := map[string]int{}
	n.peers.mu.Lock()
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		h := n.seenLocked(s.ID, term)
		if string(s.ID) == n.self.ID || h == nil {
			continue
		}
		for _, k := range h.keys {
			count[k.ID]++
		}
	}
	n.peers.mu.Unlock()
	var ids []string
	for id, c := range count {
		if c*2 > voters {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// warnPlaintext says, at most every ten minutes, that this keyless leader
// stores plaintext although the state records a key's check value: no
// voter holds the key any more, which is how encryption is turned off,
// but it is also what restarting every node without its
// --encryption-key-file by mistake looks like (a one-node store after an
// edited unit file), and that must not pass silently.
func (n *Node) warnPlaintext() {
	if !n.fsm.keys.anyCheck() || !n.fsm.keys.plain.Allow(10*time.Minute) {
		return
	}
	ids := slices.Sorted(maps.Keys(n.fsm.keys.recordedChecks()))
	n.log.Warn("encryption at rest was on (the cluster records the check value of a key), but no voter holds the key now: this leader stores responses and correlation ids in plaintext; "+
		"if that is not meant, restart the nodes with the cluster's --encryption-key-file", "key-ids", strings.Join(ids, ","))
}

// neededKeys are the key ids a leader or voter must hold: those stored
// values are sealed under, and those whose check value the state records
// while a voter holds them, so a cluster that has encrypted nothing yet
// (or whose sealed values all expired) is still an encrypted one. When no
// voter holds a recorded key any more, encryption was turned off.
func (n *Node) neededKeys() []string {
	if !n.fsm.keys.anyCheck() {
		// Only a recorded check value asks about the voters: a plaintext
		// cluster's writes take no lock of the health checks here.
		return n.fsm.keys.inUse()
	}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	return n.neededKeysLocked()
}

// neededKeysLocked is neededKeys; the caller holds n.peers.mu.
func (n *Node) neededKeysLocked() []string {
	ids := n.fsm.keys.inUse()
	for id := range n.fsm.keys.recordedChecks() {
		if slices.Contains(ids, id) {
			continue
		}
		// Until every voter was seen this term, a voter may hold it.
		if v := n.voterChecksLocked(id, nil); v.same > 0 || v.unseen > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// voterChecks counts voters, this node included, for voterChecksLocked.
type voterChecks struct {
	same    int // hold the key with the check value asked for (any, when none is)
	holders int // hold the key
	unseen  int // not seen this term
	silent  int // seen running a release that does not report its keys
	voters  int // all of them
	// byCheck counts the holders by the check value (hex) of their key.
	byCheck map[string]int
}

// voterChecksLocked counts the voters that hold key id, as this leader's
// health checks of the current term saw them: with the check value want
// (every holder when want is nil), and all of them; the unseen and the
// silent hold it as far as this leader knows. When the configuration
// cannot be read, one voter is unseen and none is counted. The caller
// holds n.peers.mu.
func (n *Node) voterChecksLocked(id string, want []byte) (v voterChecks) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return voterChecks{unseen: 1}
	}
	w := hex.EncodeToString(want)
	term := n.term()
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		v.voters++
		check := ""
		if string(s.ID) == n.self.ID {
			if c := n.Keyring().Check(id); c != nil {
				check = hex.EncodeToString(c)
			}
		} else if h := n.seenLocked(s.ID, term); h == nil {
			v.unseen++
		} else if !slices.Contains(h.features, FeatureKeyCheck) {
			v.silent++
		} else {
			check = h.keyCheck(id)
		}
		if check == "" {
			continue
		}
		v.holders++
		if want == nil || check == w {
			v.same++
		}
		if v.byCheck == nil {
			v.byCheck = map[string]int{}
		}
		v.byCheck[check]++
	}
	return v
}

// seenLocked is what this leader's health checks of term saw of member id,
// or nil when they have not answered in it. The caller holds n.peers.mu.
func (n *Node) seenLocked(id raft.ServerID, term uint64) *peerHealth {
	if h := n.peers.byID[string(id)]; h != nil && n.peers.term == term && !h.answeredAt.IsZero() {
		return h
	}
	return nil
}

// heldByMost reports whether more than half of the voters known to hold
// key id hold it with the check value c. While no check value is recorded
// it is what tells the cluster's key from one generated on a single node.
func (n *Node) heldByMost(id string, c []byte) bool {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	v := n.voterChecksLocked(id, c)
	return v.same*2 > v.holders
}

// majorityCheck is the check value (hex) of key id that more than half of
// the voters known to hold the id have, and split when they hold it but
// no value has such a majority (each node generated its own key).
func (n *Node) majorityCheck(id string) (check string, split bool) {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	v := n.voterChecksLocked(id, nil)
	for c, k := range v.byCheck {
		if k*2 > v.holders {
			return c, false
		}
	}
	return "", v.holders > 1
}

// logRefusal tries to hand the leadership to a voter that holds the key,
// and logs a refused write, at most once every ten seconds.
func (n *Node) logRefusal(err *SealRefusedError) {
	if err.Unmeasured {
		return // the next health round decides
	}
	n.handOff(err)
	if !n.fsm.keys.logged.Allow(10 * time.Second) {
		return
	}
	switch {
	case err.Few:
		n.log.Error("refusing writes: this leader's key file lists first a key that most voters lack; list it in every node's key file before making it the first (rotation step 1)", "key-id", err.KeyID, "holders", err.Holders, "voters", err.Voters)
	case err.Turning:
		n.log.Error("refusing writes: most voters hold an --encryption-key-file and this leader holds none, so it would store plaintext; it hands the leadership to a voter holding the key", "key-ids", strings.Join(err.InUse, ","))
	case err.Mismatch:
		n.log.Error("refusing writes: this leader's sealing key is not the key the cluster recorded under its id; copy the cluster's key file to this node and restart it", "key-id", err.KeyID)
	default:
		n.log.Error("refusing writes: stored values are encrypted and this leader holds no --encryption-key-file, so it would store plaintext; give it the cluster's key file and restart it", "key-ids", strings.Join(err.InUse, ","))
	}
}

// keyHandOff, run by the leader's health loop, hands the leadership over
// as soon as this leader would refuse writes for want of the cluster's key,
// before a write is refused. A keyless leader that may seal (no voter holds
// a recorded key) says from here, not from every write's seal, that it
// stores plaintext (warnPlaintext).
func (n *Node) keyHandOff() {
	n.noteVoterKeys()
	if err := n.sealRefusal(false); err != nil {
		n.handOff(err)
	} else if kr := n.Keyring(); kr == nil {
		n.warnPlaintext()
	} else if lacks := lacking(kr, n.fsm.keys.inUse()); len(lacks) > 0 {
		// It may seal under its own key, but reads and replays of the
		// values sealed under these fail (500) on every node while it
		// leads: a voter rebuilt empty with an old key file, then made
		// leader, kept the leadership (an attack on encryption at rest).
		n.handOff(&SealRefusedError{InUse: lacks, forReads: true})
	}
}

// lacking returns the ids of ids that kr does not hold.
func lacking(kr *Keyring, ids []string) []string {
	var out []string
	for _, id := range ids {
		if !kr.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// transferLacksKeys says why voter id must not be handed the leadership,
// or "": this leader's health checks of the term saw it without a key that
// stored values are sealed under (a node rebuilt with an old key file).
// Leading, it could not read them. A voter not seen this term, or of a
// release that does not report its keys, is left to raft (and, leading,
// hands over by keyHandOff).
func (n *Node) transferLacksKeys(id raft.ServerID) string {
	inUse := n.fsm.keys.inUse()
	if len(inUse) == 0 {
		return ""
	}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	h := n.seenLocked(id, n.term())
	if h == nil || !slices.Contains(h.features, FeatureKeyCheck) {
		return ""
	}
	var lacks []string
	for _, k := range inUse {
		if h.keyCheck(k) == "" {
			lacks = append(lacks, k)
		}
	}
	if len(lacks) == 0 {
		return ""
	}
	return fmt.Sprintf("%s lacks encryption key %s, under which stored values are sealed: as leader it could not read them. "+
		"Give it the cluster's key file (--encryption-key-file, the same file on every node) and restart it", id, strings.Join(lacks, ", "))
}

// transferFirstKeyOnFew says why voter id must not be handed the
// leadership because its first key, under which nothing is sealed yet,
// is held by no more than half of the voters as far as this leader has
// seen (step 2 of a rotation before step 1 reached the others): leading,
// it would refuse to encrypt with it and hand the leadership straight on,
// after the transfer had reported it moved. "" when it may lead.
func (n *Node) transferFirstKeyOnFew(id raft.ServerID) string {
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	h := n.seenLocked(id, n.term())
	if h == nil || !slices.Contains(h.features, FeatureKeyCheck) || len(h.keys) == 0 {
		return ""
	}
	first := h.keys[0]
	if slices.Contains(n.fsm.keys.inUse(), first.ID) {
		return ""
	}
	check, err := hex.DecodeString(first.Check)
	if err != nil {
		return ""
	}
	v := n.voterChecksLocked(first.ID, check)
	if v.same*2 > v.voters {
		return ""
	}
	return fmt.Sprintf("%s's first key %q (the one it would encrypt with) is held by %d of the cluster's %d voters as far as this leader has seen: leading, it would refuse to encrypt with it and hand the leadership straight on. "+
		"Add the key to every node's key file after the current first key (rotation step 1) before making it first anywhere", id, first.ID, v.same, v.voters)
}

// handOff moves the leadership to a healthy voter whose status lists the
// keys this leader lacks (with the recorded check values), so writes resume
// before an operator fixes this node. At most one attempt per health round.
func (n *Node) handOff(err *SealRefusedError) {
	if !n.fsm.keys.handOff.Allow(probeEvery) {
		return
	}
	now := time.Now()
	need := map[string]string{} // key id: recorded check value in hex, or "" when none is recorded
	ids := err.InUse
	if err.Mismatch {
		ids = []string{err.KeyID}
	}
	avoid := "" // with none recorded, this leader's own key under err.KeyID is the odd one out
	if err.Few {
		// Any healthy voter without err.KeyID: its first key is another
		// one, or it holds none and stores plaintext, as it may while most
		// voters hold no key.
		ids, need = nil, map[string]string{}
	}
	for _, id := range ids {
		need[id] = ""
		if c := n.fsm.keys.check(id); c != nil {
			need[id] = hex.EncodeToString(c)
		} else if err.Mismatch {
			// None recorded: only a voter with the key most holders of the
			// id have may seal under it. Without such a key (each node
			// generated its own), every voter would refuse as this one
			// does and hand over again: the leadership went round the
			// voters for as long as the operator took (an operator walk,
			// term 13 to 179).
			switch c, split := n.majorityCheck(id); {
			case split:
				if n.fsm.keys.warned.Allow(10 * time.Second) {
					n.log.Error("the voters hold different keys under one id (each node generated its own instead of one file copied to all): no voter may encrypt with it, so this leader keeps the leadership and refuses writes that need it; make the key once, copy the same key file to every node and restart them", "key-id", id)
				}
				return
			case c == "":
				avoid = hex.EncodeToString(n.Keyring().Check(id))
			default:
				need[id] = c
			}
		}
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	term := n.term()
	target := ""
	n.peers.mu.Lock()
	for _, s := range f.Configuration().Servers {
		h := n.peers.byID[string(s.ID)]
		if s.Suffrage != raft.Voter || string(s.ID) == n.self.ID || h == nil || n.peers.term != term {
			continue
		}
		if ok, _ := n.judge(h, s.ID, now); !ok {
			continue
		}
		fits := !err.Few || h.keyCheck(err.KeyID) == ""
		for id, c := range need {
			if got := h.keyCheck(id); got == "" || (c != "" && got != c) || (c == "" && avoid != "" && got == avoid) {
				fits = false
				break
			}
		}
		if fits {
			target = string(s.ID)
			break
		}
	}
	n.peers.mu.Unlock()
	if target == "" {
		if n.fsm.keys.warned.Allow(10 * time.Second) {
			if err.forReads {
				n.log.Warn("this leader lacks keys that stored values are sealed under, and no healthy voter is known to hold them (yet): reads and replays of those values fail until one leads, or until an operator gives this node the cluster's key file", "key-ids", strings.Join(ids, ","))
			} else if err.Few {
				n.log.Warn("this leader's first key is held by too few voters to encrypt with, and no healthy voter without it is known (yet) to hand the leadership to: writes that store a value stay refused until the other nodes hold the key (rotation step 1) or are measured", "key-id", err.KeyID, "holders", err.Holders, "voters", err.Voters)
			} else {
				n.log.Warn("no healthy voter is known to hold the key this leader lacks (yet): writes stay refused until one is, or until an operator gives this node the cluster's key file", "key-ids", strings.Join(ids, ","))
			}
		}
		return
	}
	if err.Few {
		n.log.Warn("this leader's first key is held by too few voters to encrypt with: handing the leadership to a voter without it", "to", target, "key-id", err.KeyID, "holders", err.Holders, "voters", err.Voters)
	} else {
		n.log.Warn("handing the leadership to a voter that holds the cluster's key", "to", target, "key-ids", strings.Join(ids, ","))
	}
	go func() {
		if err := n.transferLeadership(context.Background(), target, transferHandOff); err != nil {
			n.log.Warn("leadership transfer to a voter holding the key failed", "to", target, "error", err)
		}
	}()
}

// recordKeyChecks, run by the leader's health loop, records the check
// value of every key in this leader's file the state has none for, not
// only of the sealing one: a key added for a rotation (its step 1) that
// was generated on each node instead of copied is then caught when the
// nodes restart with it, before any value is sealed under it (a node
// holding other bytes under a recorded id refuses to start).
func (n *Node) recordKeyChecks() {
	kr := n.Keyring()
	if kr == nil {
		return
	}
	for _, id := range kr.IDs() {
		if n.fsm.keys.check(id) != nil {
			continue
		}
		if rec, err := n.recordKeyCheck(id, kr.Check(id)); err != nil || rec == nil {
			return // not now (a member lacks the feature, or no quorum): next round
		}
	}
}

// keyCheckRetry spaces a leader's attempts to record a check value while a
// member cannot apply OpKeyCheck (a variable for tests).
var keyCheckRetry = 10 * time.Second

// recordKeyCheck proposes the check value of this leader's sealing key and
// returns the one the state then records (another leader's may have come
// first). While a member cannot apply OpKeyCheck (a release before it,
// rolling upgrade) it returns nil: the value is sealed as before, and a
// later write records the check.
func (n *Node) recordKeyCheck(id string, own []byte) ([]byte, error) {
	k := &n.fsm.keys
	if mono.Now() < k.retryAt.Load() {
		return nil, nil
	}
	k.proposing.Lock()
	defer k.proposing.Unlock()
	if rec := k.check(id); rec != nil {
		return rec, nil
	}
	if !n.membersHave(FeatureKeyCheck) {
		if !n.membersHave("") {
			// A member not measured yet this term (a new leader's, or a
			// new cluster's, first health rounds): asked again at the
			// next round, not in 10 s, as the docs' "within a few
			// seconds of leading" says (a walk saw "not recorded" for
			// 10 s after a new encrypted cluster's first writes).
			k.retryAt.Store(mono.Now() + int64(probeEvery))
			return nil, nil
		}
		k.retryAt.Store(mono.Now() + int64(keyCheckRetry))
		n.log.Info("the check value of key "+id+" is not recorded yet: a member does not list "+FeatureKeyCheck+" (or was not measured yet); asking again in 10 s", "key-id", id)
		return nil, nil
	}
	if !n.heldByMost(id, own) {
		// On an upgrade the first leader could be the one node whose key
		// was generated on it: recording its value would make it the
		// cluster's, and the nodes holding the key of every stored value
		// would be refused at their next start.
		k.retryAt.Store(mono.Now() + int64(keyCheckRetry))
		n.log.Warn("not recording the check value of key "+id+": most voters holding that id hold another key than this leader's (a key generated on this node instead of copied?)", "key-id", id)
		return nil, nil
	}
	if _, err := n.propose(&Command{Op: OpKeyCheck, KeyCheck: &KeyCheck{ID: id, Check: own}}); err != nil {
		return nil, err
	}
	rec := k.check(id)
	if rec != nil && hmac.Equal(rec, own) {
		n.log.Info("recorded in the cluster's state the check value of a key of this node's key file (the file is unchanged): a node whose key of that id differs is refused", "key-id", id)
	}
	return rec, nil
}

// keyCollector exports the key use and the node's key ring, for
// `idem keys status` and alerts.
type keyCollector struct {
	n                      *Node
	values, buckets, until *prometheus.Desc
	ring                   *prometheus.Desc
	check, mismatch        *prometheus.Desc
}

func newKeyCollector(n *Node) *keyCollector {
	l := []string{"key_id"}
	return &keyCollector{
		n:        n,
		values:   prometheus.NewDesc("idem_encryption_key_values", "Encrypted values (responses and correlation ids) written under the key into buckets not dropped yet (replicated state; an upper bound on the live records that need the key).", l, nil),
		buckets:  prometheus.NewDesc("idem_encryption_key_buckets", "Time buckets holding values encrypted under the key.", l, nil),
		until:    prometheus.NewDesc("idem_encryption_key_needed_until_seconds", "Cluster time (Unix seconds) by which every value encrypted under the key has expired; its bucket is dropped soon after.", l, nil),
		ring:     prometheus.NewDesc("idem_encryption_keyring", "Keys this node holds (1 each); use is encrypt for the key that encrypts new values, decrypt for the others.", []string{"key_id", "use"}, nil),
		check:    prometheus.NewDesc("idem_encryption_key_check", "The check value the cluster recorded for the key id (1 each; replicated state): HMAC-SHA256(key, \"idem key check\") truncated to 16 bytes, in hex. It proves which key the id names without revealing it.", []string{"key_id", "check"}, nil),
		mismatch: prometheus.NewDesc("idem_encryption_key_mismatch", "1 for each key of this node whose check value differs from the one the cluster recorded under its id: the node holds another key under that id, cannot read values sealed under it, and refuses to seal with it.", l, nil),
	}
}

func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.values
	ch <- c.buckets
	ch <- c.until
	ch <- c.ring
	ch <- c.check
	ch <- c.mismatch
}

func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.n.KeyUse() {
		ch <- prometheus.MustNewConstMetric(c.values, prometheus.GaugeValue, float64(u.Values), u.ID)
		ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(u.Buckets), u.ID)
		ch <- prometheus.MustNewConstMetric(c.until, prometheus.GaugeValue, float64(u.UntilMs)/1000, u.ID)
	}
	for i, id := range c.n.Keyring().IDs() {
		use := "decrypt"
		if i == 0 {
			use = "encrypt"
		}
		ch <- prometheus.MustNewConstMetric(c.ring, prometheus.GaugeValue, 1, id, use)
	}
	for id, check := range c.n.fsm.keys.recordedChecks() {
		ch <- prometheus.MustNewConstMetric(c.check, prometheus.GaugeValue, 1, id, hex.EncodeToString(check))
	}
	for _, id := range c.n.wrongKeys() {
		ch <- prometheus.MustNewConstMetric(c.mismatch, prometheus.GaugeValue, 1, id)
	}
}

package raftfsm

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-store/idem/engine"
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
	// onNew is called (outside Apply's decisions) when a key id first
	// appears, so a node can say it lacks it.
	onNew func(id string)
}

const keyUsePrefix = "keyuse/"

func keyUseName(b partition.Bucket, id string) string {
	return fmt.Sprintf("%s%016x/%s", keyUsePrefix, uint64(b), id)
}

// load reads the counts from the committed state.
func (k *keyUse) load(db *engine.DB) error {
	vals, err := db.Named(keyUsePrefix)
	if err != nil {
		return fmt.Errorf("raftfsm: read key use: %w", err)
	}
	m := map[partition.Bucket]map[string]uint64{}
	for name, v := range vals {
		rest := strings.TrimPrefix(name, keyUsePrefix)
		hex, id, ok := strings.Cut(rest, "/")
		b, err := strconv.ParseUint(hex, 16, 64)
		if !ok || err != nil || len(v) != 8 || id == "" {
			return fmt.Errorf("raftfsm: bad key use entry %q", name)
		}
		if m[partition.Bucket(b)] == nil {
			m[partition.Bucket(b)] = map[string]uint64{}
		}
		m[partition.Bucket(b)][id] = binary.BigEndian.Uint64(v)
	}
	k.mu.Lock()
	k.m = m
	onNew := k.onNew
	k.mu.Unlock()
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
func (n *Node) Keyring() *Keyring { return n.cfg.Keyring }

// checkKeys refuses a start when the state needs a key the node lacks, and
// says so in the log when the node runs without some key it might need.
func (n *Node) checkKeys() error {
	if err := n.fsm.keys.load(n.db); err != nil {
		return err
	}
	var missing []string
	for _, u := range n.KeyUse() {
		if !n.cfg.Keyring.Has(u.ID) {
			missing = append(missing, u.ID)
		}
	}
	if len(missing) > 0 {
		return &MissingKeysError{IDs: missing, Have: n.cfg.Keyring.IDs()}
	}
	n.fsm.keys.mu.Lock()
	n.fsm.keys.onNew = func(id string) {
		if !n.cfg.Keyring.Has(id) {
			n.log.Error("the leader stores values encrypted with a key this node does not hold: reads of them on this node fail until it is added to --encryption-key-file", "key-id", id)
		}
	}
	n.fsm.keys.mu.Unlock()
	if kr := n.cfg.Keyring; kr != nil {
		n.log.Info("encryption at rest is on", "encrypt-key-id", kr.Primary(), "key-ids", strings.Join(kr.IDs(), ","))
	}
	return nil
}

// keyCollector exports the key use and the node's key ring, for
// `idem keys status` and alerts.
type keyCollector struct {
	n                      *Node
	values, buckets, until *prometheus.Desc
	ring                   *prometheus.Desc
}

func newKeyCollector(n *Node) *keyCollector {
	l := []string{"key_id"}
	return &keyCollector{
		n:       n,
		values:  prometheus.NewDesc("idem_encryption_key_values", "Encrypted values (responses and correlation ids) written under the key into buckets not dropped yet (replicated state; an upper bound on the live records that need the key).", l, nil),
		buckets: prometheus.NewDesc("idem_encryption_key_buckets", "Time buckets holding values encrypted under the key.", l, nil),
		until:   prometheus.NewDesc("idem_encryption_key_needed_until_seconds", "Cluster time (Unix seconds) by which every value encrypted under the key has expired; its bucket is dropped soon after.", l, nil),
		ring:    prometheus.NewDesc("idem_encryption_keyring", "Keys this node holds (1 each); use is encrypt for the key that encrypts new values, decrypt for the others.", []string{"key_id", "use"}, nil),
	}
}

func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.values
	ch <- c.buckets
	ch <- c.until
	ch <- c.ring
}

func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.n.KeyUse() {
		ch <- prometheus.MustNewConstMetric(c.values, prometheus.GaugeValue, float64(u.Values), u.ID)
		ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(u.Buckets), u.ID)
		ch <- prometheus.MustNewConstMetric(c.until, prometheus.GaugeValue, float64(u.UntilMs)/1000, u.ID)
	}
	for i, id := range c.n.cfg.Keyring.IDs() {
		use := "decrypt"
		if i == 0 {
			use = "encrypt"
		}
		ch <- prometheus.MustNewConstMetric(c.ring, prometheus.GaugeValue, 1, id, use)
	}
}

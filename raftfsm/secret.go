package raftfsm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/idem-store/idem/engine"
)

// The cluster secret keys the MAC of every fencing token (api/fencing.go),
// so that a token is worthless outside the scope it was issued for and
// cannot be guessed from a raft index. It is chosen once, by the first
// leader that needs it, and travels through the log like any other state:
// every replica, snapshot and backup holds the same one, so any node can
// verify a token another node issued. The random bytes come in the
// command; Apply only stores them, and only the first secret applied is
// kept, so two leaders racing to set one still leave every replica with
// the same secret.

// secretBytes is the size of the cluster secret (HMAC-SHA256 key).
const secretBytes = 32

// secretName is the named meta value that holds the secret: the 8-byte
// big-endian raft index of the entry that set it, then the key.
const secretName = "cluster-secret"

// ClusterSecret is the cluster's fencing-token key and the raft index of
// the entry that set it: every claim at a lower index was decided before
// the cluster had a secret (its token is a bare raft index).
type ClusterSecret struct {
	Key   []byte
	Index uint64
}

func encodeSecret(index uint64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, index), key...)
}

func decodeSecret(v []byte) (*ClusterSecret, bool) {
	if len(v) != 8+secretBytes {
		return nil, false
	}
	return &ClusterSecret{Index: binary.BigEndian.Uint64(v[:8]), Key: append([]byte(nil), v[8:]...)}, true
}

// storedSecret reads the committed secret from Pebble.
func (f *FSM) storedSecret() (*ClusterSecret, bool, error) {
	named, err := f.db.Named(secretName)
	if err != nil {
		return nil, false, fmt.Errorf("raftfsm: read the cluster secret: %w", err)
	}
	v, ok := named[secretName] // Named matches a prefix: take the exact name only
	if !ok {
		return nil, false, nil
	}
	s, ok := decodeSecret(v)
	if !ok {
		return nil, false, fmt.Errorf("raftfsm: the stored cluster secret is %d bytes, not %d", len(v), 8+secretBytes)
	}
	return s, true, nil
}

// applySecret stores the secret of an OpSetSecret entry unless the state
// has one already (committed, or set earlier in the same batch): the first
// applied wins on every replica, whatever the batching.
func (f *FSM) applySecret(txn *engine.Txn, index uint64, key []byte) {
	if f.secretTxn == txn {
		return
	}
	if _, ok, err := f.storedSecret(); ok || err != nil {
		if err != nil {
			// Pebble could not be read: going on could diverge.
			panic(err)
		}
		return
	}
	s := &ClusterSecret{Index: index, Key: append([]byte(nil), key...)}
	txn.SetNamed(secretName, encodeSecret(s.Index, s.Key))
	f.secretTxn = txn
	f.secret.Store(s)
}

// clusterSecret returns the secret once the state holds one. Once set it
// never changes, so a found secret is cached; an absent one is read again
// next time.
func (f *FSM) clusterSecret() (*ClusterSecret, bool, error) {
	if s := f.secret.Load(); s != nil {
		return s, true, nil
	}
	s, ok, err := f.storedSecret()
	if ok {
		f.secret.Store(s)
	}
	return s, ok, err
}

// ClusterSecret returns the cluster's fencing-token key, and false while
// the cluster has none yet (no claim since it was created or upgraded).
func (n *Node) ClusterSecret() (ClusterSecret, bool, error) {
	s, ok, err := n.fsm.clusterSecret()
	if !ok || err != nil {
		return ClusterSecret{}, false, err
	}
	return *s, true, nil
}

// EnsureClusterSecret makes sure the cluster has a secret before this
// leader issues a token: when the applied state holds none, it proposes
// 32 random bytes and waits until they are applied. Followers answer
// ErrNotLeader (the caller forwards). Concurrent callers on one node wait
// for one proposal.
func (n *Node) EnsureClusterSecret() error {
	if _, ok, err := n.fsm.clusterSecret(); ok || err != nil {
		return err
	}
	n.fsm.secretMu.Lock()
	defer n.fsm.secretMu.Unlock()
	if _, ok, err := n.fsm.clusterSecret(); ok || err != nil {
		return err
	}
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("raftfsm: random cluster secret: %w", err)
	}
	if _, err := n.propose(&Command{Op: OpSetSecret, Secret: key}); err != nil {
		return err
	}
	// Another leader's secret may have been applied first; either way the
	// state holds one now.
	if _, ok, err := n.fsm.clusterSecret(); !ok || err != nil {
		if err == nil {
			err = fmt.Errorf("raftfsm: the cluster secret was applied but is not in the state")
		}
		return err
	}
	n.log.Info("the cluster has a fencing-token secret now (first claim since it was created or upgraded)")
	return nil
}

package raftfsm

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Why a keyless non-voter is kept one, after a key rotation (k2 first, k1
// decrypting only): it said "the cluster encrypts with key \"k1\"", which
// is not true and reads as the key to put first; docs/SECURITY.md quotes
// "stored values are encrypted with key \"k1\"" (a walk of the page).
func TestKeptNonVoterIsToldWhyAKeyIsNeeded(t *testing.T) {
	c := newMemCluster(t)
	n1 := c.open("n1", testRaftAddrs(t, 1)[0], true) // IDEM_TEST_IP and IDEM_TEST_PORTS on a shared machine
	n1.setKeyring(testRing(t, "k1"))
	c.leader(n1)
	write(t, n1, "under-k1")
	n1.setKeyring(testRing(t, "k2", "k1")) // rotation step 2: k2 seals, k1 only decrypts
	require.Eventually(t, func() bool { return n1.fsm.keys.check("k2") != nil }, 10*time.Second, 20*time.Millisecond)

	n1.peers.mu.Lock()
	none := n1.lacksKeys(&peerHealth{answeredAt: time.Now(), features: []string{FeatureKeyCheck}})
	onlyK2 := n1.lacksKeys(&peerHealth{answeredAt: time.Now(), features: []string{FeatureKeyCheck},
		keys: []NodeKey{{ID: "k2", Check: hex.EncodeToString(n1.Keyring().Check("k2"))}}})
	n1.peers.mu.Unlock()
	require.Contains(t, none, `it has no --encryption-key-file, and stored values are encrypted with key "k1"`)
	require.NotContains(t, none, "encrypts with")
	require.Contains(t, onlyK2, `lacks key "k1" (stored values are encrypted with key "k1")`)
	require.NotContains(t, onlyK2, "encrypts with")
}

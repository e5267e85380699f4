package raftfsm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// A node whose state was applied from a raft log that is gone used to
// start with an empty log and no cluster configuration: raft.db holds a
// term, so raft refused to bootstrap it (and serve logged "bootstrapped
// the cluster" every second), and it never led. Ops walk: a three-node
// cluster of a development build that kept its log in raft-log/ (a Pebble
// log store, 08c16c6..6363399) restarted on this release stayed leaderless
// for good. Such a start is refused with what to do, and changes nothing.
func TestStartRefusesALogItDoesNotRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(dir string) error
		want string
	}{
		{"log in raft-log", func(dir string) error {
			return os.Rename(filepath.Join(dir, logStoreDir), filepath.Join(dir, oldLogDir))
		}, "raft-log holds this node's raft log in the layout of a development build"},
		{"log deleted", func(dir string) error {
			return os.RemoveAll(filepath.Join(dir, logStoreDir))
		}, "holds no raft log and there is no snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
			s := engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}
			res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 1000, RetentionMs: 3_600_000})
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeClaimed, res.Outcome)
			cfg := n.cfg
			require.NoError(t, n.Close())
			require.NoError(t, tc.lose(cfg.DataDir))

			for range 2 { // the refusal changed nothing: the second start says the same
				m, err := Open(cfg)
				if err == nil {
					m.Close()
				}
				require.Error(t, err, "a node whose raft log is gone must refuse to start: it would never lead")
				require.Contains(t, err.Error(), tc.want)
				require.Contains(t, err.Error(), "idem recover")
				require.NotContains(t, err.Error(), "rm ")
			}
		})
	}
}

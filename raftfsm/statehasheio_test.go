package raftfsm

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/faultfs"
)

// The state hash (GET /v1/admin/state, replicas compared) reads every
// record; a read the disk failed (EIO under a table, faultfs) came back
// from the store's iterator as an error, not the panic a request's read
// is turned from, and the route answered 500 "internal error". It is a
// *StoreReadError now, as any request's failed read: 503, logged at ERROR,
// naming no file to the caller.
func TestStateHashReadIOErrorIsAStoreReadError(t *testing.T) {
	ffs := faultfs.Mount(t)
	dir := filepath.Join(ffs.Dir, "fsm")
	db := storeOfClaims(t, dir, 2000, func(i, index int) *raft.Log {
		c := &Command{Op: OpClaim, NowMs: 1_700_000_000_000, WidthMs: 1000,
			Claim: &engine.ClaimArgs{Scope: engine.Scope{Principal: "p", Endpoint: "POST /x", Key: fmt.Sprint("k", i)}, Fingerprint: "f", LeaseMs: 60_000, RetentionMs: 600_000}}
		b, err := c.Encode()
		require.NoError(t, err)
		return &raft.Log{Index: uint64(index), Term: 1, Type: raft.LogCommand, Data: b}
	})
	t.Cleanup(func() { ffs.Clear(); db.Close() })

	readLogged.Store(0)
	var logs strings.Builder
	ffs.Fail(faultfs.OpRead, "*.sst", false)
	_, _, _, err := stateHashes(db, slog.New(slog.NewTextHandler(&logs, nil)))
	var re *StoreReadError
	require.ErrorAs(t, err, &re, "a state hash whose read the disk failed: %v", err)
	require.NotContains(t, re.Detail(), dir, "a caller's answer names no file of the data dir")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "Check the disk")
	require.NotEmpty(t, ffs.Hits())
}

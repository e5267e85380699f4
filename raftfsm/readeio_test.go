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
	"github.com/idem-store/idem/ttl"
)

// A read of the store that the disk fails (EIO under a table), on a real
// filesystem that fails its reads (faultfs, FUSE; needs root): a lookup
// and a claim are answered with a *StoreReadError (503 unavailable, a
// problem naming the file), logged at ERROR, where net/http recovered
// the store's panic and closed the connection unanswered; an apply that
// meets one stops the process with exit status 1 and the way out, where
// it ended with Go's panic, a goroutine dump and exit status 2. Never an
// absent record.
func TestStoreReadIOErrorIsAnsweredOrStops(t *testing.T) {
	ffs := faultfs.Mount(t)
	calls := stopHook(t)
	dir := filepath.Join(ffs.Dir, "fsm")
	const keys = 3000
	scope := func(i int) engine.Scope {
		return engine.Scope{Principal: "p", Endpoint: "POST /x", Key: fmt.Sprint("k", i)}
	}
	claim := func(i, index int) *raft.Log {
		c := &Command{Op: OpClaim, NowMs: 1_700_000_000_000, WidthMs: 1000,
			Claim: &engine.ClaimArgs{Scope: scope(i), Fingerprint: "f", LeaseMs: 60_000, RetentionMs: 600_000}}
		b, err := c.Encode()
		require.NoError(t, err)
		return &raft.Log{Index: uint64(index), Term: 1, Type: raft.LogCommand, Data: b}
	}
	db := storeOfClaims(t, dir, keys, claim)
	t.Cleanup(func() { ffs.Clear(); db.Close() })
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ffs.Fail(faultfs.OpRead, "*.sst", false)

	// A request's read (the lookup of Node.Lookup, a claim's peek).
	err := readStore(log, func() { db.Lookup(scope(0), false, 1_700_000_000_001) })
	var re *StoreReadError
	require.ErrorAs(t, err, &re, "a failed read of a stored key must be answered as one")
	require.Contains(t, re.Error(), "input/output error")
	require.Contains(t, re.Error(), ".sst")
	require.NotContains(t, re.Detail(), dir, "a caller's answer names no file of the data dir")
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "Check the disk")
	require.Zero(t, calls.Load(), "a request's failed read does not stop the node")

	// The apply of a claim of a stored key.
	logs.Reset()
	f := NewFSM(db, ttl.NewClock(0), log, nil)
	var res any
	p := func() (p any) {
		defer func() { p = recover() }()
		res = f.Apply(claim(0, keys+1))
		return nil
	}()
	require.NotNil(t, p, "an apply whose read failed must not go on (it answered %v)", res)
	require.EqualValues(t, 1, calls.Load(), "an apply whose read failed must stop the node; it logged:\n%s", logs.String())
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "cannot apply the log")
	require.Contains(t, logs.String(), "Check the disk")
	require.NotEmpty(t, ffs.Hits())
}

// storeOfClaims applies claim(i, i+1) for keys keys to a store at dir and
// opens it again, with a small cache: its records are read from its
// tables, not from memory.
func storeOfClaims(t *testing.T, dir string, keys int, claim func(i, index int) *raft.Log) *engine.DB {
	t.Helper()
	db, err := engine.Open(dir, engine.Options{CacheBytes: 1 << 20, MemTableBytes: 256 << 10})
	require.NoError(t, err)
	f := NewFSM(db, ttl.NewClock(0), nil, nil)
	for i := range keys {
		f.Apply(claim(i, i+1))
	}
	require.NoError(t, db.Close())
	db, err = engine.Open(dir, engine.Options{CacheBytes: 1 << 20, MemTableBytes: 256 << 10})
	require.NoError(t, err)
	return db
}

package engine

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// A read that fails with EIO (a bad sector under a table) never answers
// "absent": a key reported absent could be claimed twice. On a real
// filesystem that fails its reads (faultfs, FUSE; needs root), every
// lookup and claim of a stored key whose table cannot be read stops with
// the error (a panic: net/http answers a request's by closing its
// connection, the FSM's ends the process), with the probe filters loaded
// from their file, or rebuilt by a scan that meets the same error (as
// after a crash), which leaves them answering "maybe". A store that
// cannot read its tables at all is not opened.
func TestReadIOErrorNeverAnswersAbsent(t *testing.T) {
	for _, filters := range []string{"saved", "rebuilt"} {
		t.Run(filters, func(t *testing.T) {
			ffs := faultfs.Mount(t)
			dir := filepath.Join(ffs.Dir, "fsm")
			db, err := Open(dir, Options{CacheBytes: 1 << 20})
			require.NoError(t, err)
			h := &harness{t: t, db: db}
			const keys = 3000
			scope := func(i int) Scope { return Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprint("k", i)} }
			for i := range keys {
				require.Equal(t, OutcomeClaimed, h.claim(t0, args(scope(i))).Outcome)
			}
			require.NoError(t, db.pdb.Flush()) // the records in tables
			require.NoError(t, db.Close())
			ffs.Fail(faultfs.OpRead, "*.sst", false)
			_, err = Open(dir, Options{CacheBytes: 1 << 20})
			require.ErrorContains(t, err, "input/output error", "a store whose tables cannot be read must not open")
			ffs.Clear()
			db, err = Open(dir, Options{CacheBytes: 1 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { ffs.Clear(); db.Close() })
			require.True(t, db.FilterReady())
			ffs.Fail(faultfs.OpRead, "*.sst", false)
			if filters == "rebuilt" {
				require.NoError(t, db.rebuildFilter())
				<-db.filter.done
				require.False(t, db.FilterReady(), "a filter build that failed to read must answer maybe")
			}
			h = &harness{t: t, db: db, idx: 1 << 20}
			failed := 0
			for i := range keys {
				var found bool
				if panicked(func() { _, found = db.Lookup(scope(i), false, t0+1) }) {
					failed++
					continue
				}
				require.True(t, found, "key %d answered absent on a failed read", i)
			}
			var res Result
			if panicked(func() { res = h.claim(t0+1, args(scope(7))) }) {
				failed++
			} else {
				require.NotEqual(t, OutcomeClaimed, res.Outcome, "a stored key claimed again on a failed read")
			}
			require.NotZero(t, failed, "no read failed: %v", ffs)
			require.NotEmpty(t, ffs.Hits())
		})
	}
}

func panicked(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}

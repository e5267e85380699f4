package engine

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// Bug: Restore deleted the old state with a range deletion from the empty
// key. Pebble takes a span whose start is a nil slice for no span at all
// (keyspan.Span.Valid), and an empty start copied into an empty buffer is
// nil: in race and invariants builds, where Pebble copies and invalidates
// spans on purpose, the deletion was lost once flushed, and keys of the
// state a restore replaced came back after later writes (a record already
// dropped, live again; quota counters that no longer matched). No key is
// empty, so the deletion starts at the first non-empty key.
//
// Plain writes, snapshots and restores of older snapshots over the state,
// against a map: the store holds exactly the map after every step. Run it
// with -race (or -tags invariants): without the fix it fails there.
func TestRestoreOverAStateLeavesNothingOfIt(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		db := mustOpenFS(t, vfs.NewMem(), "db")
		model := map[string]string{}
		type snap struct {
			stream []byte
			m      map[string]string
		}
		var snaps []snap
		key := func() string { return fmt.Sprintf("b%02d/r/%03d", rng.IntN(30), rng.IntN(50)) }
		check := func(step int, what string) {
			t.Helper()
			got := map[string]string{}
			it, err := db.pdb.NewIter(nil)
			require.NoError(t, err)
			for ok := it.First(); ok; ok = it.Next() {
				got[string(it.Key())] = string(it.Value())
			}
			require.NoError(t, it.Close())
			require.Equal(t, model, got, "seed %d step %d, after %s", seed, step, what)
		}
		for step := range 300 {
			b := db.pdb.NewBatch()
			for range 1 + rng.IntN(10) {
				switch rng.IntN(10) {
				case 0:
					lo := fmt.Sprintf("b%02d/", rng.IntN(30))
					hi := lo[:3] + "0"
					require.NoError(t, b.DeleteRange([]byte(lo), []byte(hi), nil))
					for k := range model {
						if k >= lo && k < hi {
							delete(model, k)
						}
					}
				case 1, 2:
					k := key()
					require.NoError(t, b.Delete([]byte(k), nil))
					delete(model, k)
				default:
					k, v := key(), fmt.Sprint(step)
					require.NoError(t, b.Set([]byte(k), []byte(v), nil))
					model[k] = v
				}
			}
			require.NoError(t, b.Commit(pebble.NoSync))
			check(step, "a batch")
			switch rng.IntN(20) {
			case 0:
				snaps = append(snaps, snap{snapshotBytes(t, db), maps.Clone(model)})
			case 1:
				if len(snaps) > 0 {
					s := snaps[rng.IntN(len(snaps))]
					require.NoError(t, db.Restore(bytes.NewReader(s.stream)))
					model = maps.Clone(s.m)
					check(step, "a restore")
				}
			}
		}
		require.NoError(t, db.Close())
	}
}

package engine

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/partition"
)

// pairsOf reads a snapshot stream's pairs (checked by readStream).
func pairsOf(t *testing.T, stream []byte) [][2][]byte {
	t.Helper()
	var out [][2][]byte
	_, _, err := readStream(bytes.NewReader(stream), func(k, v []byte) error {
		out = append(out, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
		return nil
	})
	require.NoError(t, err)
	return out
}

// streamOfPairs writes pairs, sorted by key, with a valid pair count and
// checksum: a stream rewritten by someone who knows the format.
func streamOfPairs(pairs [][2][]byte) []byte {
	slices.SortStableFunc(pairs, func(x, y [2][]byte) int { return bytes.Compare(x[0], y[0]) })
	as := make([][2]string, len(pairs))
	for i, p := range pairs {
		as[i] = [2]string{string(p[0]), string(p[1])}
	}
	return streamOf(as...)
}

// Bug (a backup walk): a backup is checked by its checksums alone, so one
// rewritten with valid checksums and mangled contents (a record's value
// that does not decode, a key under the bucket prefix of no bucket, a
// record moved to another bucket than its expiry's, or given a far-future
// expiry) was reported "checksums: ok" by inspect and restored; the
// restored node then closed the connection of every request touching such
// a record (a recovered panic), its sweeper and every later backup failed
// on such a key, and a record in the wrong bucket went with that bucket.
// ScanStream (inspect, a save's check) and RestoreChecked (restore) refuse
// such a stream as ErrSnapshot, changing nothing; a store's own stream
// passes both.
func TestBackupStreamWithAForeignLayoutIsRefused(t *testing.T) {
	h := newHarness(t)
	for _, k := range []string{"k1", "k2", "k3"} {
		require.Equal(t, OutcomeClaimed, h.claim(t0, args(scope(k))).Outcome)
	}
	r := h.claim(t0+1, args(scope("done")))
	require.Equal(t, OutcomeCompleted, h.complete(t0+2, scope("done"), r.Record.Token, resp("{}")).Outcome)
	snap, err := h.db.Snapshot()
	require.NoError(t, err)
	var good bytes.Buffer
	_, err = snap.WriteTo(&good)
	require.NoError(t, err)
	require.NoError(t, snap.Close())
	_, err = ScanStream(bytes.NewReader(good.Bytes()))
	require.NoError(t, err, "a store's own stream")

	isRecord := func(k []byte) bool {
		_, rest, ok := partition.Parse(k)
		return ok && len(rest) > 0 && rest[0] == kindRecord
	}
	// each rewrites the good stream's pairs in one hostile way
	cases := map[string]func(p [][2][]byte) [][2][]byte{
		"a record that does not decode": func(p [][2][]byte) [][2][]byte {
			for i := range p {
				if isRecord(p[i][0]) {
					p[i][1] = []byte{codecVersion1, 9, 9, 9}
					break
				}
			}
			return p
		},
		"a key under the bucket prefix that is no bucket's": func(p [][2][]byte) [][2][]byte {
			return append(p, [2][]byte{[]byte("b\x00"), []byte("x")})
		},
		"a record expiring ten days later than its bucket": func(p [][2][]byte) [][2][]byte {
			for i := range p {
				if isRecord(p[i][0]) {
					rec, err := DecodeRecord(p[i][1])
					require.NoError(t, err)
					rec.ExpiresMs += 10 * 24 * 3600 * 1000
					p[i][1] = EncodeRecord(rec)
					break
				}
			}
			return p
		},
		"a record moved to its own far-future bucket": func(p [][2][]byte) [][2][]byte {
			for i := range p {
				if isRecord(p[i][0]) {
					rec, err := DecodeRecord(p[i][1])
					require.NoError(t, err)
					rec.ExpiresMs = 253402300799000 // 9999-12-31
					_, rest, _ := partition.Parse(p[i][0])
					p[i][0] = RecordKey(partition.Of(rec.ExpiresMs, testWidth), rest[2:])
					p[i][1] = EncodeRecord(rec)
					break
				}
			}
			return p
		},
		"a record under another scope's key": func(p [][2][]byte) [][2][]byte {
			for i := range p {
				if isRecord(p[i][0]) {
					rec, err := DecodeRecord(p[i][1])
					require.NoError(t, err)
					rec.Key = "someone-else"
					p[i][1] = EncodeRecord(rec)
					break
				}
			}
			return p
		},
	}
	for name, mangle := range cases {
		t.Run(name, func(t *testing.T) {
			bad := streamOfPairs(mangle(pairsOf(t, good.Bytes())))
			_, err := ScanStream(bytes.NewReader(bad))
			require.Error(t, err, "inspect")
			require.True(t, errors.Is(err, ErrSnapshot), "%v", err)

			db := mustOpen(t)
			before, err := db.StateHash()
			require.NoError(t, err)
			err = db.RestoreChecked(bufio.NewReader(bytes.NewReader(bad)))
			require.Error(t, err, "restore")
			require.True(t, errors.Is(err, ErrSnapshot), "%v", err)
			after, err := db.StateHash()
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused restore changes nothing")
		})
	}
	db := mustOpen(t)
	require.NoError(t, db.RestoreChecked(io.Reader(bytes.NewReader(good.Bytes()))), "a store's own stream restores")
}

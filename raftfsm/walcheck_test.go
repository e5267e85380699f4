package raftfsm

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A bit flips in the header of an entry frame in the middle of the raft
// log's newest segment. raft-wal read the segment up to it and took it for
// a torn end: the log lost every entry after it, silently (an operator
// walk: 936 entries cut to 280). It is refused now; a segment whose last
// batch is cut short, as a crash leaves it, still opens without it.
func TestDamageBeforeTheEndOfTheNewestSegmentIsRefused(t *testing.T) {
	build := func(t *testing.T) (string, string) { return walOfBatches(t, 10) }

	path, seg := build(t)
	b, err := os.ReadFile(seg)
	require.NoError(t, err)
	// The header of the 25th entry frame, in the third batch of ten.
	off, entries := walFileHeader, 0
	for entries < 25 {
		typ, next, ok := frame(b, off, true)
		require.True(t, ok)
		if typ == walFrameEntry {
			entries++
		}
		if entries < 25 {
			off = next
		}
	}
	b[off] ^= 0x10
	require.NoError(t, os.WriteFile(seg, b, 0o600))
	_, err = openWAL(path, nil)
	require.Error(t, err, "a log cut at a damaged header must not open as shorter")
	require.ErrorContains(t, err, "whole batch")
	require.ErrorContains(t, err, path)

	// Torn: the last batch cut short, the file then zero-filled.
	path, seg = build(t)
	b, err = os.ReadFile(seg)
	require.NoError(t, err)
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	clear(b[end-40 : end])
	require.NoError(t, os.WriteFile(seg, b, 0o600))
	var logged bytes.Buffer
	s, err := openWAL(path, slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, err, "a torn last batch is a crash's")
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(90), last)
	require.NoError(t, s.Close())
	// What the crash dropped is said, once; a whole log says nothing.
	require.Contains(t, logged.String(), "level=WARN")
	require.Contains(t, logged.String(), "holds 10 entries from index 91 after its last synced batch")
	require.Equal(t, 1, strings.Count(logged.String(), "cut short by a crash"))
	// Until the next append writes over them, the torn bytes are there and
	// said at every open; after it, not.
	logged.Reset()
	s, err = openWAL(path, slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, err)
	require.Contains(t, logged.String(), "holds 10 entries from index 91 after its last synced batch")
	var again []*raft.Log
	for j := uint64(91); j <= 100; j++ {
		again = append(again, &raft.Log{Index: j, Term: 2, Type: raft.LogCommand, Data: fmt.Appendf(nil, "again-%03d", j)})
	}
	require.NoError(t, s.StoreLogs(again))
	require.NoError(t, s.Close())
	logged.Reset()
	s, err = openWAL(path, slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, err)
	last, err = s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(100), last)
	require.NoError(t, s.Close())
	require.NotContains(t, logged.String(), "crash", "the append after the crash wrote over the torn batch")
	path, _ = build(t)
	s, err = openWAL(path, slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NotContains(t, logged.String(), "crash")
}

// A crash can stop a batch's write after its entries and before its commit
// frame, or cut the commit frame's checksum short of what it covers: both
// are dropped by raft-wal as it opens, and said.
func TestTornEndsAreSaid(t *testing.T) {
	_, seg := walOfBatches(t, 3)
	b, err := os.ReadFile(seg)
	require.NoError(t, err)
	stop := walStop(b)
	keep, _, dropped := tornEnd(b, stop)
	require.Equal(t, 0, dropped)
	require.Equal(t, stop, keep, "a whole log is kept to its end")

	// The last commit frame lost: its ten entries are after the last commit.
	c := b[:stop-walFrameHeader]
	keep, first, dropped := tornEnd(c, walStop(c))
	require.Equal(t, 10, dropped)
	require.Equal(t, uint64(21), first)
	require.Less(t, keep, len(c))

	// The last commit frame there, its checksum not covering what was written.
	d := slices.Clone(b)
	d[stop-walFrameHeader-1] ^= 0x01 // the last entry's last padding or data byte
	keep2, first, dropped := tornEnd(d, walStop(d))
	require.Equal(t, 10, dropped)
	require.Equal(t, uint64(21), first)
	require.Equal(t, keep, keep2, "both cut at the end of the second batch")
}

// walOfBatches writes a raft log of n batches of ten entries (1, 2, ...)
// and returns its directory and its one segment file.
func walOfBatches(t *testing.T, n int) (string, string) {
	path := filepath.Join(t.TempDir(), "raft-wal")
	require.NoError(t, os.Mkdir(path, 0o700))
	s, err := openWAL(path, nil)
	require.NoError(t, err)
	for i := uint64(1); i <= uint64(10*n); i += 10 {
		var batch []*raft.Log
		for j := i; j < i+10; j++ {
			batch = append(batch, &raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry-%03d", j)})
		}
		require.NoError(t, s.StoreLogs(batch))
	}
	require.NoError(t, s.Close())
	segs, err := filepath.Glob(filepath.Join(path, "*.wal"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	return path, segs[0]
}

package raftfsm

import (
	"fmt"
	"os"
	"path/filepath"
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
	build := func(t *testing.T) (string, string) {
		path := filepath.Join(t.TempDir(), "raft-wal")
		require.NoError(t, os.Mkdir(path, 0o700))
		s, err := openWAL(path, nil)
		require.NoError(t, err)
		for i := uint64(1); i <= 100; i += 10 {
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
	s, err := openWAL(path, nil)
	require.NoError(t, err, "a torn last batch is a crash's")
	defer s.Close()
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(90), last)
}

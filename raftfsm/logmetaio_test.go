package raftfsm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// A compaction of the raft log whose metadata write or fsync fails
// (wal-meta.db, the bolt file listing the segments: EIO) stops the node
// with the raft log's line, as a failed append does. Raft logged it
// ("failed to take snapshot: log compaction failed: write …wal-meta.db:
// input/output error") and the node went on, its later metadata commits
// fsynced over pages the OS may have dropped after the failed one (found
// on a FUSE filesystem failing wal-meta.db under a claim load).
//
// A raft log entry that the disk fails to read (EIO in a segment file)
// outside the start stops the node with the way out too. A leader logged
// "raft: failed to get log … input/output error" every 10 s and went on
// leading, and the member catching up it could not send the entries to
// stayed behind for as long as it led (found on a FUSE filesystem
// failing the leader's segment reads as a member restarted); a
// follower's apply of such an entry panicked inside raft.
//
// The disk is a real one that fails (faultfs): bolt's writes and fsyncs
// take no injected filesystem. The log store runs in a process of its
// own: bolt reads its file through mmap, and a page fault served by the
// faulting thread's own process can stop it for good (the Go runtime's
// stop-the-world waits for that thread).
func TestRaftLogIOErrorOfATruncationOrAReadStops(t *testing.T) {
	if what := os.Getenv("IDEM_TEST_LOG_EIO"); what != "" {
		logEIOChild(t, what, os.Getenv("IDEM_TEST_LOG_EIO_DIR"))
		return
	}
	faultfs.Skip(t)
	for _, c := range []struct {
		what, pattern string
		op            faultfs.Op
		said          string
	}{
		{"truncation write", "wal-meta.db", faultfs.OpWrite, "wal-meta.db"},
		{"truncation fsync", "wal-meta.db", faultfs.OpFsync, "wal-meta.db"},
		{"read", "*.wal", faultfs.OpRead, "could not be read at entry 5"},
	} {
		t.Run(c.what, func(t *testing.T) {
			ffs := faultfs.Mount(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRaftLogIOErrorOfATruncationOrAReadStops$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEM_TEST_LOG_EIO="+c.what, "IDEM_TEST_LOG_EIO_DIR="+ffs.Dir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			in, err := cmd.StdinPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var stdout strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				stdout.WriteString(sc.Text() + "\n")
				if sc.Text() == "fail now" {
					ffs.Fail(c.op, c.pattern, false)
					fmt.Fprintln(in, "failing")
				}
			}
			err = cmd.Wait()
			ffs.Clear()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "the child must stop: %v\n%s\n%s", err, stdout.String(), stderr.String())
			require.Equal(t, 1, ee.ExitCode(), "a failed %s of the raft log must stop the node; failed: %v\nstdout:\n%s\nstderr:\n%.4000s", c.what, ffs, stdout.String(), stderr.String())
			require.NotEmpty(t, ffs.Hits())
			require.Contains(t, stderr.String(), "level=ERROR")
			require.Contains(t, stderr.String(), "input/output error")
			require.Contains(t, stderr.String(), c.said)
			require.Contains(t, stderr.String(), "Check the disk")
		})
	}
}

// logEIOChild opens a raft log on dir (the test's failing disk), stores
// 20 entries, has the disk fail, and truncates the log's head or reads
// an entry back.
func logEIOChild(t *testing.T, what, dir string) {
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	require.NoError(t, err)
	ls, err := openLogStore(dir, stable, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	require.NoError(t, err)
	s := guardedLogStore{ls, &diskGuard{}, func() bool { return true }, newLogCache()}
	var entries []*raft.Log
	for i := uint64(1); i <= 20; i++ {
		entries = append(entries, testEntry(i, 1))
	}
	require.NoError(t, s.StoreLogs(entries))
	s.recent = newLogCache() // read from the disk, as a catch-up's old entries
	fmt.Println("fail now")
	bufio.NewReader(os.Stdin).ReadString('\n')
	if what == "read" {
		var l raft.Log
		err = s.GetLog(5, &l)
	} else {
		err = s.DeleteRange(1, 10) // a compaction: the head goes
	}
	fmt.Println("went on:", err)
	os.Exit(3)
}

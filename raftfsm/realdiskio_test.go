package raftfsm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/faultfs"
)

// The promise of docs/DISK.md ("I/O errors") on a real filesystem that
// fails (faultfs, FUSE; needs root): a one-node store whose disk returns
// EIO on a write or an fsync of its raft log, its store's WAL or the raft
// log's metadata stops with exit status 1 and the line naming the file
// and the way out, and started again once the disk works it holds every
// claim it acknowledged. The node runs in a process of its own, the
// filesystem with it: its stop ends both, and the restart reads the
// backing directory.
func TestRealDiskIOErrorStopsAndTheRestartHoldsWhatWasAcknowledged(t *testing.T) {
	if what := os.Getenv("IDEM_TEST_REAL_EIO"); what != "" {
		realEIOChild(t, what, os.Getenv("IDEM_TEST_REAL_EIO_DIR"), os.Getenv("IDEM_TEST_REAL_EIO_ADDR"))
		return
	}
	faultfs.Skip(t)
	for _, what := range []string{"raft-log-fsync", "raft-log-write", "store-wal-fsync", "store-wal-write"} {
		t.Run(what, func(t *testing.T) {
			ffs, addr := faultfs.Mount(t), testRaftAddrs(t, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRealDiskIOErrorStopsAndTheRestartHoldsWhatWasAcknowledged$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEM_TEST_REAL_EIO="+what, "IDEM_TEST_REAL_EIO_DIR="+ffs.Dir, "IDEM_TEST_REAL_EIO_ADDR="+addr)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			in, err := cmd.StdinPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var acked []string
			var stdout strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				stdout.WriteString(line + "\n")
				if k, ok := strings.CutPrefix(line, "acked "); ok {
					acked = append(acked, k)
				}
				if line == "fail now" {
					switch what {
					case "raft-log-fsync":
						ffs.Fail(faultfs.OpFsync, "*.wal", true)
					case "raft-log-write":
						ffs.Fail(faultfs.OpWrite, "*.wal", true)
					case "store-wal-fsync":
						ffs.Fail(faultfs.OpFsync, "fsm/*.log", true)
					case "store-wal-write":
						ffs.Fail(faultfs.OpWrite, "fsm/*.log", true)
					}
					fmt.Fprintln(in, "failing")
				}
			}
			err = cmd.Wait()
			ffs.Clear()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "the node must exit on the failed %s: %v\n%s\n%s", what, err, stdout.String(), stderr.String())
			require.Equal(t, 1, ee.ExitCode(), "failed: %v\nstdout:\n%s\nstderr:\n%.5000s", ffs, stdout.String(), stderr.String())
			require.NotEmpty(t, ffs.Hits())
			require.NotContains(t, stderr.String(), "fatal error")
			require.Contains(t, stderr.String(), "level=ERROR")
			require.Contains(t, stderr.String(), "input/output error")
			require.Contains(t, stderr.String(), "Check the disk")
			require.GreaterOrEqual(t, len(acked), 20)

			// Started again once the disk works (what it holds, read
			// past the filesystem: this process serves it).
			requireAckedAfterRestart(t, ffs.Backing(), addr, acked)
		})
	}
}

// realEIOChild runs the node on the failing disk (dir, served by the
// test's process): it prints each key it has acknowledged, has the disk
// fail after 20, and goes on writing.
func realEIOChild(t *testing.T, what, dir, addr string) {
	n, claim := startAckingChild(t, dir, addr)
	fmt.Println("fail now")
	bufio.NewReader(os.Stdin).ReadString('\n')
	if what == "store-wal-fsync" {
		go n.Snapshot() // the store's WAL is fsynced before a snapshot
	}
	for i := range 200 {
		claim(fmt.Sprint("b", i))
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("still running")
	os.Exit(3)
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The end of a node's raft-wal segment is lost (the file truncated or its
// tail overwritten: a disk or a copy that lost the last writes) below the
// log's first index, which the snapshots had moved up. idem serve failed
// with raft's "failed to get last log at index N: log not found", naming
// neither the cause nor a fix, and idem recover, the documented way out
// for a node whose log is lost, failed too ("non-monotonic log entries").
// Now serve refuses naming the damaged log and the commands that help, and
// recover makes a node that serves every acknowledged record again.
func TestDamagedRaftLogTailIsNamedAndRecovered(t *testing.T) {
	dir, httpAddr, raftAddr, args, keys := compactedNode(t, "dmg", 200, "64", "16")

	segs, err := filepath.Glob(filepath.Join(dir, "raft-wal", "*.wal"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	written := len(bytes.TrimRight(b, "\x00"))
	// Lose the second half of what was written: the entries there are far
	// above the first index only once the head was truncated, so the log
	// now ends below its start.
	clear(b[written/2 : written])
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	bad := launch(t, dir, httpAddr, raftAddr, args...)
	requireExits(t, bad, "a node whose raft log lost its end must not start")
	out := bad.logs.String()
	require.Contains(t, out, "raft log")
	require.Contains(t, out, filepath.Join(dir, "raft-wal"))
	require.Contains(t, out, "idem recover --data-dir "+dir+" --node-id n1 --peers n1="+raftAddr, "the message gives the way out: %s", out)
	require.NotContains(t, out, "failed to get last log")

	recoverAndCheck(t, dir, httpAddr, raftAddr, args, keys)
}

// Pebble's manifest marker (fsm/marker.manifest.*, an empty file whose
// name says which MANIFEST is current) is gone: deleted with the other
// empty files by a clean-up, or lost by the filesystem. Pebble then took
// fsm/ for a new store and replayed only its last WAL beside the tables
// the old MANIFEST listed: the node started, ready, with the applied index
// of the WAL and without the records in those tables, and answered 404 for
// keys it had acknowledged. It now refuses, names the marker and how to put
// it back, and with the marker back serves every record.
func TestMissingPebbleManifestMarkerIsRefused(t *testing.T) {
	dir, httpAddr, raftAddr, args, keys := nodeWithTables(t)
	markers, _ := filepath.Glob(filepath.Join(dir, "fsm", "marker.manifest.*"))
	require.Len(t, markers, 1)
	require.NoError(t, os.Remove(markers[0]))

	bad := launch(t, dir, httpAddr, raftAddr, args...)
	requireExits(t, bad, "a store without its manifest marker must not start as a new one")
	out := bad.logs.String()
	manifest := strings.TrimPrefix(filepath.Base(markers[0]), "marker.manifest.000000.")
	manifest = manifest[strings.Index(manifest, "MANIFEST-"):]
	require.Contains(t, out, "touch "+filepath.Join(dir, "fsm", "marker.manifest.000001."+manifest), "the message says how to put the marker back: %s", out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fsm", "marker.manifest.000001."+manifest), nil, 0o600))

	start(t, dir, httpAddr, raftAddr, args...)
	for _, key := range keys {
		a := call("GET", httpAddr, recordPath(key, ""), "")
		require.Equal(t, 200, a.code, "%s: %s", key, a)
	}
}

// requireExits requires p to exit with an error within 20 s.
func requireExits(t *testing.T, p *proc, msg string) {
	t.Helper()
	select {
	case <-p.done:
		require.Error(t, p.err, msg)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still running after 20 s; logs:\n%s", msg, p.logs)
	}
}

// nodeWithTables runs a node, claims keys, and stops it cleanly twice, so
// that its records are in Pebble tables (*.sst), not only in its WAL.
func nodeWithTables(t *testing.T) (dir, httpAddr, raftAddr string, args, keys []string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "n1")
	httpAddr, raftAddr = freePort(t), freePort(t)
	args = []string{"--min-free-disk", "0", "--snapshot-threshold", "64", "--snapshot-interval", "1s"}
	p := start(t, dir, httpAddr, raftAddr, args...)
	for i := range 200 {
		key := fmt.Sprintf("mk-%d", i)
		claimOK(t, httpAddr, key)
		keys = append(keys, key)
	}
	// Stopped and started again, Pebble writes what its WAL held to a table.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	p = start(t, dir, httpAddr, raftAddr, args...)
	claimOK(t, httpAddr, "mk-last")
	keys = append(keys, "mk-last")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	tables, _ := filepath.Glob(filepath.Join(dir, "fsm", "*.sst"))
	require.NotEmpty(t, tables, "the records must be in tables for this test")
	return dir, httpAddr, raftAddr, args, keys
}

// A table of the store is damaged (a flipped byte in an .sst). The node
// died on the first read of it with a Go panic and a goroutine dump, its
// only hint Pebble's "on-disk corruption: PATH". It still stops, but first
// says which file is damaged and what to do.
func TestDamagedPebbleTableSaysWhatToDo(t *testing.T) {
	dir, httpAddr, raftAddr, args, _ := nodeWithTables(t)
	tables, _ := filepath.Glob(filepath.Join(dir, "fsm", "*.sst"))
	f, err := os.OpenFile(tables[0], os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, 300)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	bad := launch(t, dir, httpAddr, raftAddr, args...)
	requireExits(t, bad, "a node whose store is damaged stops")
	out := bad.logs.String()
	require.Contains(t, out, tables[0])
	require.Contains(t, out, "empty data dir and --join", "the log says what to do: %s", out)
	require.Contains(t, out, "idem snapshot restore")
}

// A node's snapshots are deleted (rm -rf D/snapshots/*, to free space)
// after its raft log was compacted behind them. idem serve panicked in
// raft ("panic: log not found" at index 1) and idem recover failed the
// same way ("failed to get log at index 1"), though Pebble held every
// record. Now serve refuses, naming the snapshots directory and the way
// out, and recover rebuilds the node from its state.
func TestDeletedSnapshotsAreNamedAndRecovered(t *testing.T) {
	dir, httpAddr, raftAddr, args, keys := compactedNode(t, "snap", 60, "16", "4")
	snaps, err := filepath.Glob(filepath.Join(dir, "snapshots", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, snaps)
	for _, s := range snaps {
		require.NoError(t, os.RemoveAll(s))
	}

	bad := launch(t, dir, httpAddr, raftAddr, args...)
	requireExits(t, bad, "a node whose compacted log lost its snapshot must not start")
	out := bad.logs.String()
	require.NotContains(t, out, "panic")
	require.Contains(t, out, "no snapshot in "+filepath.Join(dir, "snapshots"))
	require.Contains(t, out, "Nothing was changed")
	require.Contains(t, out, "idem recover --data-dir "+dir+" --node-id n1 --peers n1="+raftAddr, "the message gives the way out: %s", out)

	out, err = idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1="+raftAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "none covers the raft log", "the dry run says what recovery does first")
	recoverAndCheck(t, dir, httpAddr, raftAddr, args, keys)
}

// compactedNode runs node n1 with snapshots every threshold entries
// (keeping trailing of them in the log), claims n keys named prefix-i,
// waits for a snapshot, and stops it cleanly: a data dir whose raft log
// was compacted behind a snapshot. It returns the data dir, the addresses
// and flags to start it again with, and the keys.
func compactedNode(t *testing.T, prefix string, n int, threshold, trailing string) (dir, httpAddr, raftAddr string, args, keys []string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "n1")
	httpAddr, raftAddr = freePort(t), freePort(t)
	args = []string{"--min-free-disk", "0", "--snapshot-threshold", threshold, "--snapshot-interval", "1s", "--trailing-logs", trailing}
	p := start(t, dir, httpAddr, raftAddr, args...)
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		claimOK(t, httpAddr, key)
		keys = append(keys, key)
	}
	waitFor(t, 20*time.Second, "a snapshot", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
		return len(m) > 0, fmt.Sprint(m)
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	return dir, httpAddr, raftAddr, args, keys
}

// recoverAndCheck runs idem recover --yes on the one-node data dir dir,
// starts it with args, and requires every key answered and a new claim
// taken.
func recoverAndCheck(t *testing.T, dir, httpAddr, raftAddr string, args, keys []string) {
	t.Helper()
	out, err := idemCmd(t, "recover", "--data-dir", dir, "--node-id", "n1", "--peers", "n1="+raftAddr, "--yes")
	require.NoError(t, err, out)
	start(t, dir, httpAddr, raftAddr, args...)
	for _, key := range keys {
		a := call("GET", httpAddr, recordPath(key, ""), "")
		require.Equal(t, 200, a.code, "%s: %s", key, a)
	}
	claimOK(t, httpAddr, "after-recover")
}

// A bit flips in the leader's raft log, in an entry it applied long ago
// (a stored response). raft-wal checked no CRC there: the leader, restarted,
// sent the entry as read to a follower that had been down, and that
// follower served, and once it led replayed to retries, a response that
// was not the one acknowledged (a durability walk, three real nodes). Now
// the leader refuses to start naming its damaged log, the follower never
// holds the damaged response, and the way out the message gives (rebuild
// the node from its peers) leaves every acknowledged response on every
// node, byte for byte.
func TestDamagedLogEntryIsNeverReplicated(t *testing.T) {
	c := threeOnOneIP(t)
	leader := c.leader()
	body := func(key string) string { return "response-of-" + key + "-" + strings.Repeat("x", 48) }
	acked := func(addr, key string) {
		completeOK(t, addr, key, claimOK(t, addr, key).Token, body(key))
	}
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("r-%d", i))
		acked(leader.http, keys[len(keys)-1])
	}
	rest := c.others(leader)
	behind, other := rest[0], rest[1]
	behind.kill(t)
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("s-%d", i))
		acked(leader.http, keys[len(keys)-1])
	}
	other.stop(t)
	leader.stop(t)

	segs, err := filepath.Glob(filepath.Join(leader.dir, "raft-wal", "*.wal"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	at := bytes.Index(b, []byte(body("s-5")))
	require.Positive(t, at)
	b[at+20] ^= 0x01 // an x becomes a y
	damaged := strings.Replace(body("s-5"), "x", "y", 1)
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	// The damaged leader and the node that lacks the entry, without the
	// third: only the damaged log could bring that node up to date.
	c.restart(leader, nil)
	c.restart(behind, nil)
	requireExits(t, leader.p, "a node whose raft log holds a damaged entry must not start")
	out := leader.p.logs.String()
	require.Contains(t, out, "raft log entry damaged")
	require.Contains(t, out, filepath.Join(leader.dir, "raft-wal"))
	require.Contains(t, out, "idem cluster remove --id "+leader.id)
	require.Contains(t, out, "empty data dir and --join")
	a := call("GET", behind.http, recordPath("s-5", "stale"), "")
	require.NotContains(t, string(a.body), base64Of(damaged), "the damaged response reached a follower")

	// The way out: the healthy members, then remove the damaged node and
	// start it empty with --join.
	c.restart(other, nil)
	waitFor(t, 30*time.Second, "the damaged node removed", func() (bool, string) {
		out, err := idemCmd(t, "cluster", "remove", "--id", leader.id, "--addr", other.http)
		return err == nil, out
	})
	require.NoError(t, os.Rename(leader.dir, leader.dir+".damaged"))
	leader.p = launch(t, leader.dir, leader.http, leader.raft, "--node-id", leader.id, "--join", behind.http+","+other.http, "--min-free-disk", "0")
	c.waitStable(c.nodes...)
	for _, n := range c.nodes {
		waitFor(t, 30*time.Second, n.id+" holds every response", func() (bool, string) {
			for _, key := range keys {
				a := call("GET", n.http, recordPath(key, "stale"), "")
				var r recordAnswer
				if a.err != nil || a.code != 200 || json.Unmarshal(a.body, &r) != nil || r.Record.Response == nil {
					return false, key + ": " + a.String()
				}
				require.Equal(t, body(key), string(r.Record.Response.Body), "%s on %s", key, n.id)
			}
			return true, ""
		})
	}
}

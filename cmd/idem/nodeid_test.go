package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// exited waits for a serve that must refuse to start and returns its
// output and exit code.
func exited(t *testing.T, p *proc) (string, int) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not exit; it should have refused to start:\n%s", p.logs)
	}
	var ee *exec.ExitError
	require.ErrorAs(t, p.err, &ee, "%s", p.logs)
	return p.logs.String(), ee.ExitCode()
}

// A one-node store whose node.json was deleted, started under another
// --node-id (a typo, the wrong unit file), ran as a node outside its
// configuration, never ready, advised an idem cluster join against a
// member that does not exist, and rewrote node.json with the wrong id:
// the right --node-id was then refused as differing from it. It is now
// refused before anything is written, naming the id the stored raft
// configuration holds.
func TestLostNodeFileRefusesAnotherNodeID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	claimOK(t, httpAddr, "before")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	require.NoError(t, os.Remove(filepath.Join(dir, "node.json")))
	before := listDir(t, dir)

	// At the same raft address: the configuration gives it to n1.
	out, code := exited(t, launch(t, dir, httpAddr, raftAddr, "--node-id", "n2"))
	require.Equal(t, 2, code, "%s", out)
	require.Contains(t, out, `--node-id "n2" is not the node`)
	require.Contains(t, out, "gives this node's raft address "+raftAddr+" to member n1")
	require.Contains(t, out, "Start it with --node-id n1")
	require.NotContains(t, out, "idem cluster join")
	require.NoFileExists(t, filepath.Join(dir, "node.json"), "node.json written with an id the data dir's configuration never held")
	require.Equal(t, before, listDir(t, dir), "the refused start changed the data dir")

	// At another raft address: the configuration is a one-node cluster
	// of n1.
	out, code = exited(t, launch(t, dir, httpAddr, freePort(t), "--node-id", "n2"))
	require.Equal(t, 2, code, "%s", out)
	require.Contains(t, out, "is a one-node cluster of n1, at raft address "+raftAddr)
	require.Contains(t, out, "Start it with --node-id n1")
	require.NoFileExists(t, filepath.Join(dir, "node.json"))

	// The right id starts, with the records, and node.json says it.
	start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	a := call("GET", httpAddr, recordPath("before", ""), "")
	require.Equal(t, 200, a.code, "%s", a)
	require.Contains(t, string(a.body), `"state":"in_progress"`)
	a = call("POST", httpAddr, "/v1/claim", claimReq("before", "another"))
	require.Equal(t, 409, a.code, "the claim made before must still hold: %s", a)
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"node_id":"n1"`)
}

// A member removed from its cluster, whose node.json is lost, still
// starts under its own id (and waits to be added back): its stored
// configurations listed it, even if the latest is its cluster without it.
func TestLostNodeFileRemovedMemberStarts(t *testing.T) {
	t.Parallel()
	h1, r1 := freePort(t), freePort(t)
	start(t, t.TempDir(), h1, r1, "--node-id", "n1")
	dir := t.TempDir()
	h2, r2 := freePort(t), freePort(t)
	n2 := launch(t, dir, h2, r2, "--node-id", "n2", "--join", h1)
	waitFor(t, 30*time.Second, "n2 is a healthy voter, caught up", func() (bool, string) {
		m, _ := memberAt(t, h1, "n2")
		_, err := os.Stat(filepath.Join(dir, "joining"))
		return m.Suffrage == "voter" && m.Healthy && os.IsNotExist(err), fmt.Sprintf("%+v, joining file: %v", m, err)
	})
	out, code := cli(t, "remove", "--addr", h1, "--id", "n2")
	require.Equal(t, 0, code, "%s", out)
	time.Sleep(time.Second) // whatever of the removal reaches n2
	require.NoError(t, n2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, n2.wait())
	require.NoError(t, os.Remove(filepath.Join(dir, "node.json")))

	n2 = launch(t, dir, h2, r2, "--node-id", "n2")
	waitFor(t, 20*time.Second, "n2 records its id", func() (bool, string) {
		select {
		case <-n2.done:
			t.Fatalf("the removed member did not start:\n%s", n2.logs)
		default:
		}
		b, _ := os.ReadFile(filepath.Join(dir, "node.json"))
		return strings.Contains(string(b), `"node_id":"n2"`), string(b)
	})
	time.Sleep(2 * time.Second)
	select {
	case <-n2.done:
		t.Fatalf("the removed member exited:\n%s", n2.logs)
	default:
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Where the stored configuration does not tell which member a data dir
// is (several, none at this raft address), the refusal names them all.
func TestStoredIDErrorNamesTheMembers(t *testing.T) {
	err := storedIDError(&serveConfig{dataDir: "/d"}, &raftfsm.StoredIDError{NodeID: "n9", Members: []raftfsm.Peer{{ID: "n1", RaftAddr: "a:1"}, {ID: "n2", RaftAddr: "b:2"}}})
	require.ErrorAs(t, err, new(usageError))
	require.Contains(t, err.Error(), "lists n1 at a:1, n2 at b:2 (no configuration it holds lists n9)")
	require.Contains(t, err.Error(), "Start it with the --node-id of the member whose data dir it is")
}

// A node.json that an earlier release rewrote with a mistaken --node-id
// refused the right one with nothing saying the way out; the refusal now
// says to move it aside, and the start without it checks the id against
// the stored configuration.
func TestWrongNodeFileSaysTheWayOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	claimOK(t, httpAddr, "before")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())
	path := filepath.Join(dir, "node.json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), `"n1"`, `"n2"`, 1)), 0o600))

	out, code := exited(t, launch(t, dir, httpAddr, raftAddr, "--node-id", "n1"))
	require.Equal(t, 2, code, "%s", out)
	require.Contains(t, out, `--node-id "n1" differs from "n2"`)
	// The flag is the likelier mistake, and said first: an operator who
	// moved node.json aside on a mere typo went on to run n3's data dir as
	// n2 (walk of the operator docs).
	require.Contains(t, out, "start it with --node-id n2. Only if that file is what is wrong")
	require.Contains(t, out, "mv "+path+" "+path+".bad")
	require.NoError(t, os.Rename(path, path+".bad"))
	start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	a := call("GET", httpAddr, recordPath("before", ""), "")
	require.Equal(t, 200, a.code, "%s", a)
}

// A --data-dir with a typo beside a node's data dir starts a new, empty
// store where every key is free again. The warning names the node's dir
// beside it and says to move the new one aside, not to delete it: by the
// time an operator reads it, a client may hold a claim the new store
// acknowledged (no idem message advises deleting a data dir).
func TestDataDirTypoBesideANodeWarnsToMoveTheNewOneAside(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	real := filepath.Join(parent, "node-a")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, real, httpAddr, raftAddr, "--node-id", "n1")
	claimOK(t, httpAddr, "kept")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait())

	typo := filepath.Join(parent, "node-b")
	q := start(t, typo, httpAddr, raftAddr, "--node-id", "n1")
	logs := waitForLine(t, q.logs, serving) // /readyz can answer before it
	require.Contains(t, logs, "NEW, EMPTY one-node cluster", "no warning for a fresh data dir beside a node's")
	require.Contains(t, logs, real+" holds a node's data")
	require.Contains(t, logs, "move the new directory it made aside")
	require.NotContains(t, logs, "delete", "the warning advises deleting a data dir that may already hold acknowledged claims")

	// A fresh dir with no node beside it is a plain first start: no warning.
	alone := filepath.Join(t.TempDir(), "data")
	r := start(t, alone, freePort(t), freePort(t), "--node-id", "n1")
	require.NotContains(t, waitForLine(t, r.logs, serving), "NEW, EMPTY", "said before the start line, if at all")
}

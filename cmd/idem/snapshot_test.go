package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idemCmd runs the idem binary and returns its combined output.
func idemCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

type inspected struct {
	Header struct {
		AppliedIndex  uint64 `json:"applied_index"`
		ClusterTimeMs int64  `json:"cluster_time_ms"`
		Records       int64  `json:"records"`
		Scope         string `json:"scope"`
		RetentionMs   int64  `json:"retention_ms"`
	} `json:"header"`
	RecordsCounted int64 `json:"records_counted"`
}

func inspectJSON(t *testing.T, file string) inspected {
	t.Helper()
	out, err := idemCmd(t, "snapshot", "inspect", file, "--json")
	require.NoError(t, err, out)
	var in inspected
	require.NoError(t, json.Unmarshal([]byte(out), &in), out)
	return in
}

// completeWithHeaders stores a response with headers, for replays to show.
func completeWithHeaders(t *testing.T, addr, key, token string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"principal": cPrincipal, "endpoint": cEndpoint, "key": key, "token": token,
		"response": map[string]any{"status": 202, "content_type": "text/plain; charset=utf-8",
			"headers": map[string]string{"Location": "/jobs/" + key, "X-Trace": "t-" + key}, "body": []byte("accepted " + key)}})
	waitFor(t, 30*time.Second, "complete "+key, func() (bool, string) {
		a := call("POST", addr, "/v1/complete", string(b))
		return a.err == nil && a.code == 200, a.String()
	})
}

// A backup saved through a follower while claims and completes continue
// holds every write acknowledged before the save began; restored into a new
// data dir it starts a one-node cluster that replays each of them byte for
// byte, continues cluster time from the backup's, takes new claims, and
// that a second node then joins. Damaged files are refused, naming them.
func TestSnapshotSaveUnderLoadRestoreAndJoin(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	follower := c.others(leader)[0]
	// The cluster's retention, set away from every node's --retention, is
	// replicated state: the backup holds it and a restored node keeps it.
	out, code := cli(t, "set-retention", "--retention", "36h", "--addr", follower.http)
	require.Equal(t, 0, code, "%s", out)
	for i := range 10 {
		key := fmt.Sprintf("hdr-%d", i)
		cl := claimOK(t, leader.http, key)
		completeWithHeaders(t, follower.http, key, cl.Token)
	}

	stop := make(chan struct{})
	res, wg := runLoad(6, "snap", 0, func() *cnode { return c.nodes[rand.IntN(3)] }, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	time.Sleep(time.Second)
	// What was acknowledged before the save began must be in the backup.
	res.mu.Lock()
	ackedClaims := map[string]bool{}
	for k := range res.claimed {
		ackedClaims[k] = true
	}
	ackedCompletes := map[string]bool{}
	for k := range res.completed {
		ackedCompletes[k] = true
	}
	res.mu.Unlock()
	for i := range 10 {
		ackedCompletes[fmt.Sprintf("hdr-%d", i)] = true
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "idem.snap")
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", follower.http)
	require.NoError(t, err, out)
	require.Contains(t, out, "saved "+file)
	time.Sleep(300 * time.Millisecond) // writes go on after the save
	close(stop)
	wg.Wait()
	require.Empty(t, res.bad)
	require.Greater(t, len(res.completed), len(ackedCompletes)-10, "no write acknowledged while saving")
	t.Logf("load: %d claims, %d completes acknowledged (%d and %d before the save)", len(res.claimed), len(res.completed), len(ackedClaims), len(ackedCompletes))
	left, err := filepath.Glob(file + ".tmp*")
	require.NoError(t, err)
	require.Empty(t, left, "save left its temporary file")

	in := inspectJSON(t, file)
	require.GreaterOrEqual(t, in.RecordsCounted, int64(len(ackedClaims)+10))
	require.Equal(t, in.Header.Records, in.RecordsCounted)
	require.Equal(t, "endpoint", in.Header.Scope)
	require.Equal(t, (36 * time.Hour).Milliseconds(), in.Header.RetentionMs)
	out, err = idemCmd(t, "snapshot", "inspect", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "checksums:      ok")
	require.Contains(t, out, "retention:      36h0m0s (of new records")

	// Replays from the source cluster, to compare with the restored node's.
	replay := func(addr, key string) answer {
		return call("POST", addr, "/v1/claim", claimReq(key, "replay-check"))
	}
	want := map[string]answer{}
	for key := range ackedCompletes {
		a := replay(leader.http, key)
		require.Equal(t, 200, a.code, "%s: %s", key, a)
		want[key] = a
	}

	// Restore into a new data dir and start it, as a new one-node cluster.
	r1 := &cnode{id: "r1", ip: "127.0.0.14", dir: filepath.Join(dir, "restored")}
	r1.http, r1.raft = freePortOn(t, r1.ip), freePortOn(t, r1.ip)
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", r1.dir, "--node-id", r1.id, "--raft-addr", r1.raft)
	require.NoError(t, err, out)
	// The command to paste names the binary as it was run (a path here,
	// as the README's ./bin/idem), not an "idem" the shell may not find.
	require.Contains(t, out, "start it with: "+binary+" serve --data-dir "+r1.dir+" --node-id r1 --raft-addr "+r1.raft+"\n")
	require.Contains(t, out, "plus the --http-addr it serves on", "r1 is no member of the backup: no HTTP address to give")
	require.NoError(t, filepath.WalkDir(r1.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err == nil && st.Mode().Perm()&0o077 != 0 {
			err = fmt.Errorf("%s is %v: a restored data dir is the user's alone, as a node's", p, st.Mode().Perm())
		}
		return err
	}))
	// Started beside the cluster the backup came from, the restored node
	// is a cluster of its own: its state records the source's members, and
	// asking those to let it join made it their fourth voter, its restored
	// state replaced by theirs.
	r1.args = []string{"--node-id", r1.id}
	r1.p = start(t, r1.dir, r1.http, r1.raft, r1.args...)
	time.Sleep(3 * time.Second) // the membership loop asks every second
	for _, n := range []*cnode{c.nodes[0], r1} {
		st, err := c.status(n)
		require.NoError(t, err)
		var ids []string
		for _, m := range st.Nodes {
			ids = append(ids, m.ID)
		}
		if n == r1 {
			require.Equal(t, []string{"r1"}, ids, "the restored node's members")
		} else {
			require.NotContains(t, ids, "r1", "the restored node joined the cluster its backup came from")
		}
	}
	for _, n := range c.nodes {
		n.stop(t) // the restored node must stand on its own
	}
	for key, w := range want {
		a := replay(r1.http, key)
		require.Equal(t, w.code, a.code, "%s: %s", key, a)
		require.Equal(t, string(w.body), string(a.body), "replay of %s is not byte-identical", key)
		require.Equal(t, w.hdr.Get("Content-Type"), a.hdr.Get("Content-Type"))
	}
	require.Contains(t, string(want["hdr-3"].body), `"Location":"/jobs/hdr-3"`)
	for key := range ackedClaims {
		a := call("GET", r1.http, recordPath(key, ""), "")
		require.Equal(t, 200, a.code, "acknowledged claim %s lost: %s", key, a)
	}
	// New claims work, stamped no earlier than the backup's cluster time.
	cl := claimOK(t, r1.http, "after-restore")
	created, err := time.Parse(time.RFC3339Nano, cl.CreatedAt)
	require.NoError(t, err)
	require.GreaterOrEqual(t, created.UnixMilli(), in.Header.ClusterTimeMs, "cluster time went back")
	expires, err := time.Parse(time.RFC3339Nano, cl.ExpiresAt)
	require.NoError(t, err)
	require.Equal(t, 36*time.Hour, expires.Sub(created), "the restored node keeps the cluster's retention, not its --retention")
	completeOK(t, r1.http, "after-restore", cl.Token, `{"ok":true}`)

	// A second node joins the restored one and serves every record.
	j2 := &cnode{id: "j2", ip: "127.0.0.15", dir: filepath.Join(dir, "j2")}
	j2.http, j2.raft = freePortOn(t, j2.ip), freePortOn(t, j2.ip)
	j2.args = []string{"--node-id", j2.id, "--join", r1.http}
	j2.p = launch(t, j2.dir, j2.http, j2.raft, j2.args...)
	rc := &testCluster{t: t, nodes: []*cnode{r1, j2}}
	rc.waitStable(r1, j2)
	waitSameState(t, r1, j2)
	for key, w := range want {
		a := call("GET", j2.http, recordPath(key, "stale"), "")
		require.Equal(t, 200, a.code, "%s on the joined node: %s", key, a)
		var r recordAnswer
		require.NoError(t, json.Unmarshal(a.body, &r))
		require.Equal(t, "completed", r.Record.State, key)
		require.Contains(t, string(w.body), base64Of(string(r.Record.Response.Body)), key)
	}

	// Saving over an existing file needs --force; restoring into a
	// running node's data dir is refused.
	out, err = idemCmd(t, "snapshot", "save", file, "--addr", j2.http)
	require.Error(t, err)
	require.Contains(t, out, "exists; pass --force")
	out, err = idemCmd(t, "snapshot", "save", file, "--addr", j2.http, "--force")
	require.NoError(t, err, out)
	require.Greater(t, inspectJSON(t, file).Header.AppliedIndex, in.Header.AppliedIndex)
	// r1 runs on it: its lock refuses first, naming it (the dir is not
	// empty either).
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", r1.dir, "--node-id", "x1", "--raft-addr", r1.raft)
	require.Error(t, err)
	require.Contains(t, out, "idem serve is running on "+r1.dir)
	require.Contains(t, out, "nothing was changed")

	// Damaged files: refused by inspect and restore, naming the file;
	// restore leaves the target as it was.
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x20
	for name, b := range map[string][]byte{
		"truncated.snap": data[:len(data)*2/3],
		"flipped.snap":   flipped,
		"magic.snap":     append([]byte("NOTIDEM!"), data[8:]...),
	} {
		bad := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(bad, b, 0o600))
		out, err := idemCmd(t, "snapshot", "inspect", bad)
		require.Error(t, err, name)
		require.Contains(t, out, bad+": raftfsm: bad backup", name)
		target := filepath.Join(dir, "target-"+name)
		require.NoError(t, os.Mkdir(target, 0o755))
		out, err = idemCmd(t, "snapshot", "restore", bad, "--data-dir", target, "--node-id", "x1", "--raft-addr", "127.0.0.9:7071")
		require.Error(t, err, name)
		require.Contains(t, out, bad+": raftfsm: bad backup", name)
		entries, err := os.ReadDir(target)
		require.NoError(t, err)
		require.Empty(t, entries, "restore of %s wrote into the target", name)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*.restore-*"))
	require.Empty(t, leftovers, "a failed restore left its build behind")
}

// A backup of a store that never took a claim restores too.
func TestSnapshotOfEmptyStore(t *testing.T) {
	dir := t.TempDir()
	httpAddr := freePort(t)
	p := start(t, filepath.Join(dir, "src"), httpAddr, freePort(t))
	file := filepath.Join(dir, "empty.snap")
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", httpAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, "0 records")
	in := inspectJSON(t, file)
	require.Zero(t, in.RecordsCounted)
	p.cmd.Process.Kill()
	p.wait()

	raftAddr := freePort(t)
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "new"), "--node-id", "e1", "--raft-addr", raftAddr)
	require.NoError(t, err, out)
	httpAddr = freePort(t)
	start(t, filepath.Join(dir, "new"), httpAddr, raftAddr, "--node-id", "e1")
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)

	// Usage errors name the flag.
	out, err = idemCmd(t, "snapshot", "restore", file, "--node-id", "e2", "--raft-addr", raftAddr)
	require.Error(t, err)
	require.Contains(t, out, "--data-dir is required")
	// No default raft address: one that is not the served --raft-addr
	// would be written into the restored configuration.
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "y"), "--node-id", "e2")
	require.Error(t, err)
	require.Contains(t, out, "--raft-addr is required")
	require.NoDirExists(t, filepath.Join(dir, "y"))
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "x"), "--node-id", "bad id")
	require.Error(t, err)
	require.Contains(t, out, "--node-id")
	out, err = idemCmd(t, "snapshot", "inspect")
	require.Error(t, err)
	require.True(t, strings.Contains(out, "exactly one FILE"), out)
	out, err = idemCmd(t, "snapshot", "inspect", filepath.Join(dir, "missing.snap"))
	require.Error(t, err)
	require.Contains(t, out, "missing.snap")
}

// A restore killed before it finished (kill -9 while it wrote) leaves its
// half-built copy, DIR.restore-*, beside DIR: the retry succeeded and said
// nothing of it, so a copy of the backup's records stayed there unseen.
// The retry now names it and says to delete it.
func TestRestoreNamesTheCopyAKilledRestoreLeft(t *testing.T) {
	dir := t.TempDir()
	httpAddr := freePort(t)
	p := start(t, filepath.Join(dir, "src"), httpAddr, freePort(t))
	claimOK(t, httpAddr, "before-backup")
	file := filepath.Join(dir, "b.snap")
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", httpAddr)
	require.NoError(t, err, out)
	p.cmd.Process.Kill()
	p.wait()

	// What restore builds DIR in (os.MkdirTemp beside it), as a killed
	// restore leaves it.
	left := filepath.Join(dir, "new.restore-1234567")
	require.NoError(t, os.MkdirAll(filepath.Join(left, "fsm"), 0o700))
	out, err = idemCmd(t, "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "new"), "--node-id", "n1", "--raft-addr", freePort(t))
	require.NoError(t, err, out)
	require.Contains(t, out, left+" is left from a restore into "+filepath.Join(dir, "new")+" that was stopped before it finished")
	require.Contains(t, out, "delete it")
	// It is only named: a restore running beside this one may own it.
	require.DirExists(t, left)
}

// A save killed while it received (kill -9, a lost terminal) leaves
// FILE.tmp-*, a partial copy of every record, beside FILE: the next save
// succeeded and said nothing of it, nor did a save that then failed on the
// disk those leftovers filled (a walk left three, 80 MB). A save now names
// them, and leaves them in place: another save may still own one.
func TestSaveNamesTheFileAKilledSaveLeft(t *testing.T) {
	dir := t.TempDir()
	httpAddr := freePort(t)
	start(t, filepath.Join(dir, "src"), httpAddr, freePort(t))
	claimOK(t, httpAddr, "before-backup")
	file := filepath.Join(dir, "b.snap")
	// What save receives into (os.CreateTemp beside FILE), as a killed save
	// leaves it; and one of another FILE's, which is not named.
	left := file + ".tmp-1234567"
	require.NoError(t, os.WriteFile(left, []byte("IDEM partial"), 0o600))
	other := filepath.Join(dir, "c.snap.tmp-7654321")
	require.NoError(t, os.WriteFile(other, []byte("IDEM partial"), 0o600))
	out, err := idemCmd(t, "snapshot", "save", file, "--addr", httpAddr)
	require.NoError(t, err, out)
	require.Contains(t, out, left+" (12 bytes) is left from a save into "+file+" that was stopped before it finished")
	require.Contains(t, out, "delete it")
	require.NotContains(t, out, other)
	require.Equal(t, 1, strings.Count(out, "is left from a save"), out)
	require.FileExists(t, left)
	require.FileExists(t, file)
}

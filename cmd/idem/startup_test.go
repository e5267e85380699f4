package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Careless starts of `idem serve` (review of 2026-12-01): each must be
// refused before it changes anything an operator has to undo.

// serveExit runs `idem serve args...` to its end (20 s at most) and returns
// its exit code and output.
func serveExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"serve"}, args...)...).CombinedOutput()
	require.NoError(t, ctx.Err(), "idem serve %v did not exit:\n%s", args, out)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

// TestFailedStartDoesNotPinDataDir: a first start that failed on a port or
// a certificate had already written node.json (node id, bucket width,
// scope), so the retry with a corrected --node-id was refused ("--node-id
// n2 differs from n1, the node ... was created for").
func TestFailedStartDoesNotPinDataDir(t *testing.T) {
	ca := newPKI(t)
	c, _ := ca.cert("n1", "--ip", "127.0.0.9")
	_, otherKey := ca.cert("n2", "--ip", "127.0.0.9")
	busy, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	defer busy.Close()

	dir := filepath.Join(t.TempDir(), "d")
	httpAddr, raftAddr := freePort(t), freePort(t)
	for _, tc := range []struct {
		args []string
		code int    // 0: any failure
		want string // in the output
		// dirMayExist: the failure comes from raftfsm.Open, which may have
		// created the dir; node.json must still be absent.
		dirMayExist bool
	}{
		{args: []string{"--http-addr", "127.0.0.1:99999", "--raft-addr", raftAddr}, code: 2, want: `--http-addr "127.0.0.1:99999"`},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", "127.0.0.9:70710"}, code: 2, want: `--raft-addr "127.0.0.9:70710"`},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", httpAddr}, code: 2, want: "--http-addr and --raft-addr are both"},
		{args: []string{"--http-addr", busy.Addr().String(), "--raft-addr", raftAddr}, want: "--http-addr"},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", busy.Addr().String()}, want: "--raft-addr"},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", raftAddr, "--health-addr", httpAddr}, code: 2, want: "--health-addr " + httpAddr + " is --http-addr's or --raft-addr's"},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", raftAddr, "--health-addr", "nope"}, code: 2, want: `--health-addr "nope"`},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", raftAddr, "--health-addr", busy.Addr().String()}, want: "--health-addr"},
		{args: []string{"--http-addr", httpAddr, "--raft-addr", raftAddr, "--tls-cert-file", c, "--tls-key-file", otherKey, "--tls-ca-file", ca.ca()}, want: "private key does not match"},
		// More than the whole disk: a bad flag, refused before anything.
		{args: []string{"--http-addr", httpAddr, "--raft-addr", raftAddr, "--min-free-disk", "1000000000000000000"}, code: 2, want: "--min-free-disk 1000000TB is more than the whole disk holding"},
	} {
		code, out := serveExit(t, append([]string{"--data-dir", dir}, tc.args...)...)
		require.NotEqual(t, 0, code, "%v must fail:\n%s", tc.args, out)
		if tc.code != 0 {
			require.Equal(t, tc.code, code, "%v:\n%s", tc.args, out)
		}
		require.Contains(t, out, tc.want, "%v", tc.args)
		_, err := os.Stat(filepath.Join(dir, "node.json"))
		require.ErrorIs(t, err, os.ErrNotExist, "%v failed and wrote node.json", tc.args)
		if !tc.dirMayExist {
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "%v failed and created the data dir", tc.args)
		}
	}
	// The corrected start is not refused, and fixes what it was given.
	p := start(t, dir, httpAddr, raftAddr, "--node-id", "n2", "--scope", "principal")
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"node_id":"n2"`)
	require.Contains(t, string(b), `"scope":"principal"`)
	p.cmd.Process.Kill()
	p.wait()
	code, out := serveExit(t, "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--node-id", "n3")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `--node-id "n3" differs from "n2"`)
}

// TestFreshDataDirLockedBeforeNodeFile: two nodes started at once on one new
// data dir: one runs, the other is refused, and node.json is the running
// node's (it is written under the data dir's lock, not before it).
func TestFreshDataDirLockedBeforeNodeFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	a := launch(t, dir, freePort(t), freePort(t), "--node-id", "na")
	b := launch(t, dir, freePort(t), freePort(t), "--node-id", "nb")
	var running, refused *proc
	require.Eventually(t, func() bool {
		select {
		case <-a.done:
			running, refused = b, a
			return true
		case <-b.done:
			running, refused = a, b
			return true
		default:
			return false
		}
	}, 20*time.Second, 20*time.Millisecond, "one of two nodes on one data dir must be refused:\n%s\n%s", a.logs, b.logs)
	require.Error(t, refused.err)
	waitReady(t, running)
	id := "na"
	if running == b {
		id = "nb"
	}
	nf, err := os.ReadFile(filepath.Join(dir, "node.json"))
	require.NoError(t, err)
	require.Contains(t, string(nf), `"node_id":"`+id+`"`, "node.json is not the running node's; the refused one said:\n%s", refused.logs)
}

func waitReady(t *testing.T, p *proc) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond, "node on %s never became ready:\n%s", p.http, p.logs)
}

// TestForeignDataDirRefused: a --data-dir that exists, is not empty and
// holds no idem node (the parent of the node dirs, a node's fsm/) started
// a new empty store there, writing a ballast: on one node every key was
// free again. A data dir of an older idem (no node.json) and an empty
// mount point (lost+found, .DS_Store) still start.
func TestForeignDataDirRefused(t *testing.T) {
	root := t.TempDir()
	node := filepath.Join(root, "n1")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, node, httpAddr, raftAddr)
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())
	require.NoError(t, os.MkdirAll(filepath.Join(root, "n2"), 0o755))
	file := filepath.Join(root, "notes.txt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))

	for _, tc := range []struct{ dir, want string }{
		{root, "under it, n1 holds a node: give that"},
		{filepath.Join(node, "fsm"), "it is inside the data dir " + node},
		{file, "is not a directory"},
	} {
		before := listTree(t, tc.dir)
		code, out := serveExit(t, "--data-dir", tc.dir, "--http-addr", httpAddr, "--raft-addr", raftAddr)
		require.Equal(t, 2, code, "--data-dir %s:\n%s", tc.dir, out)
		require.Contains(t, out, "--data-dir "+tc.dir)
		require.Contains(t, out, tc.want)
		require.NotContains(t, out, "bootstrapped")
		require.Equal(t, before, listTree(t, tc.dir), "the refused start changed %s", tc.dir)
	}
	_, out := serveExit(t, "--data-dir", root, "--http-addr", httpAddr, "--raft-addr", raftAddr)
	require.Contains(t, out, "is not empty and holds no idem node")

	// A data dir of an idem that wrote no node.json starts, with its records.
	require.NoError(t, os.Remove(filepath.Join(node, "node.json")))
	start(t, node, httpAddr, raftAddr)
	code, body = post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 409, code, "the node lost its record: %s", body)

	// An empty filesystem's mount point starts a new node.
	mnt := filepath.Join(root, "mnt")
	require.NoError(t, os.MkdirAll(filepath.Join(mnt, "lost+found"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, ".DS_Store"), nil, 0o644))
	start(t, mnt, freePort(t), freePort(t))

	// So does a new dir the node's own log is written into
	// (idem serve --data-dir d >d/idem.log 2>&1).
	logged := filepath.Join(root, "logged")
	require.NoError(t, os.MkdirAll(logged, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(logged, "idem.log"), []byte("started\n"), 0o644))
	start(t, logged, freePort(t), freePort(t))
}

// listTree is every path under dir (dir itself when it is a file).
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		paths = append(paths, path)
		return err
	}))
	return paths
}

// TestServeRefusesBadJoinFlags: addresses that `idem serve` accepted and
// then retried forever or recorded as the node's: --join 127.0.0.1 dialled
// port 80 forever, --join ,, never bootstrapped and said nothing, and
// --http-advertise garbage became the node's HTTP address in the cluster.
// Each is refused at once with exit 2, naming the flag, before the data
// dir is created.
func TestServeRefusesBadJoinFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	httpAddr, raftAddr := freePort(t), freePort(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--join", "127.0.0.1"}, `--join: "127.0.0.1" is not host:port`},
		{[]string{"--join", "127.0.0.9:7070,127.0.0.9"}, `--join: "127.0.0.9" is not host:port`},
		{[]string{"--join", "https://127.0.0.9:7070"}, `--join: "https://127.0.0.9:7070" is not host:port`},
		{[]string{"--join", ",,"}, `--join ",," names no address`},
		{[]string{"--join", ",,", "--bootstrap-expect", "3"}, `--join ",," names no address`},
		{[]string{"--http-advertise", "garbage"}, `--http-advertise "garbage" is not host:port`},
		{[]string{"--http-advertise", "127.0.0.9:0"}, `--http-advertise "127.0.0.9:0" is not host:port`},
		{[]string{"--raft-advertise", "garbage"}, `--raft-advertise "garbage" is not host:port`},
		{[]string{"--raft-advertise", "127.0.0.9:99999"}, `--raft-advertise "127.0.0.9:99999" is not host:port`},
		{[]string{"--raft-advertise", "0.0.0.0:7071"}, `--raft-advertise "0.0.0.0:7071" names no address other nodes can dial`},
		{[]string{"--raft-addr", "0.0.0.0:" + strings.Split(raftAddr, ":")[1], "--insecure"}, "names no address other nodes can dial: give --raft-advertise"},
	} {
		args := withFlags([]string{"--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr}, tc.args...)
		code, out := serveExit(t, args...)
		require.Equal(t, 2, code, "%v:\n%s", tc.args, out)
		require.Contains(t, out, tc.want, "%v", tc.args)
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "%v was refused after creating the data dir", tc.args)
	}
	// What the join API accepts still starts: an http:// prefix on --join,
	// and an advertise address with an empty host (this machine).
	p := launch(t, dir, httpAddr, raftAddr, "--join", "http://"+freePort(t)+", ", "--http-advertise", ":"+strings.Split(httpAddr, ":")[1])
	require.Eventually(t, func() bool { return strings.Contains(p.logs.String(), "did not answer") }, 15*time.Second, 50*time.Millisecond, "%s", p.logs)
}

// TestServeEnvErrorsNameVariableAndValue: IDEM_RETENTION=abc stopped idem
// serve with "$IDEM_RETENTION (--retention): parse error", the flag
// package's bare error, without the value; a second bad variable's line
// had no "idem serve:" in front.
func TestServeEnvErrorsNameVariableAndValue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	t.Setenv("IDEM_RETENTION", "abc")
	t.Setenv("IDEM_MAX_KEYS_PER_PRINCIPAL", "many")
	t.Setenv("IDEM_ALLOW_SHORT_RETENTION", "maybe")
	code, out := serveExit(t, "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t))
	require.Equal(t, 2, code, out)
	for _, want := range []string{
		`idem serve: $IDEM_RETENTION (--retention): invalid duration "abc"` + "\n",
		`idem serve: $IDEM_MAX_KEYS_PER_PRINCIPAL (--max-keys-per-principal): invalid integer "many"` + "\n",
		`idem serve: $IDEM_ALLOW_SHORT_RETENTION (--allow-short-retention): invalid boolean "maybe"` + "\n",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "parse error")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		require.True(t, strings.HasPrefix(l, "idem serve: $IDEM_"), "every line names the command and the variable:\n%s", out)
	}
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// memberWithOtherNodeFileScope is a stopped one-node store whose cluster
// pinned the principal scope and whose node.json says endpoint, what a node
// created with the default scope holds.
func memberWithOtherNodeFileScope(t *testing.T) (dir, httpAddr, raftAddr, nodeFile string) {
	t.Helper()
	dir = t.TempDir()
	httpAddr, raftAddr = freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--scope", "principal")
	code, _ := post(t, httpAddr, "/v1/claim", `{"principal":"p","endpoint":"a","key":"k","fingerprint":"ff"}`)
	require.Equal(t, 201, code)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	nodeFile = filepath.Join(dir, "node.json")
	b, err := os.ReadFile(nodeFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(nodeFile, bytes.Replace(b, []byte(`"principal"`), []byte(`"endpoint"`), 1), 0o600))
	return dir, httpAddr, raftAddr, nodeFile
}

// A member whose node.json says another scope than the one its cluster
// pinned (a bootstrap with mixed --scope, or a node added by hand with
// idem cluster join, which sends no scope) restarts in the cluster's mode.
// It could not be restarted at all: without --scope the pinned mode
// refused it ("start it with --scope principal"), and with that flag
// node.json did ("--scope principal differs from endpoint").
func TestRestartTakesTheClusterScopeOverNodeFile(t *testing.T) {
	dir, httpAddr, raftAddr, path := memberWithOtherNodeFileScope(t)

	p := start(t, dir, httpAddr, raftAddr)
	waitForLine(t, p.logs, "the cluster's scope mode, fixed by its first write, is principal")
	code, _ := post(t, httpAddr, "/v1/claim", `{"principal":"p","endpoint":"b","key":"k","fingerprint":"ff"}`)
	require.Equal(t, 409, code, "principal scope: another endpoint is the same record")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), `"scope":"principal"`)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	out, err := exec.Command(binary, "serve", "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--scope", "endpoint").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "differs from principal")
}

// The same member, started with the cluster's own --scope (what a unit file
// that lists --scope on every node passes): node.json's other scope must
// not refuse it with "the scope cannot change", the opposite of the fix the
// operator needs; it takes the cluster's mode as without the flag.
func TestRestartWithTheClusterScopeFlagOverNodeFile(t *testing.T) {
	dir, httpAddr, raftAddr, path := memberWithOtherNodeFileScope(t)

	p := start(t, dir, httpAddr, raftAddr, "--scope", "principal")
	code, _ := post(t, httpAddr, "/v1/claim", `{"principal":"p","endpoint":"b","key":"k","fingerprint":"ff"}`)
	require.Equal(t, 409, code, "principal scope: another endpoint is the same record")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), `"scope":"principal"`)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
}

// A node.json that does not parse is refused with what to do: it said only
// "is corrupt". Moved aside as told, the node starts with its records.
func TestCorruptNodeFileSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	code, _ := post(t, httpAddr, "/v1/claim", `{"principal":"p","endpoint":"e","key":"k","fingerprint":"ff"}`)
	require.Equal(t, 201, code)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	path := filepath.Join(dir, "node.json")
	// Cut short; then parsing but empty (it said "invalid config: bucket
	// width 0s is below 1ms", naming neither the file nor a given flag).
	for _, bad := range []string{"{\"node_id\":", "{}"} {
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
		out, err := exec.Command(binary, "serve", "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--node-id", "n1").CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), path+" is corrupt", "node.json %s", bad)
		require.Contains(t, string(out), "Move it aside (mv "+path+" "+path+".bad)", "node.json %s", bad)
	}
	require.NoError(t, os.Rename(path, path+".bad"))
	start(t, dir, httpAddr, raftAddr, "--node-id", "n1")
	code, _ = post(t, httpAddr, "/v1/claim", `{"principal":"p","endpoint":"e","key":"k","fingerprint":"ff"}`)
	require.Equal(t, 409, code, "the record claimed before is still there")
}

// A data dir without node.json (an older idem's, or one made by hand)
// whose cluster's first write fixed a bucket width: the node starts with
// the cluster's width, says so, and node.json records it. Bug: node.json
// was written, and the start logged, with --bucket-width (its default, or
// the flag given), not the width in force.
func TestStartWithoutNodeFileTakesTheClusterBucketWidth(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--bucket-width", "1h")
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())
	path := filepath.Join(dir, "node.json")

	for _, tc := range []struct {
		args []string
		said string
	}{
		{nil, "this data dir had no node.json, so it was written with --bucket-width's default 2h0m0s, but the cluster's bucket width, fixed by its first write, is 1h0m0s"},
		{[]string{"--bucket-width", "30m"}, "--bucket-width 30m0s differs from 1h0m0s, the cluster's bucket width (fixed by its first write): this node uses 1h0m0s"},
	} {
		require.NoError(t, os.Remove(path))
		p := start(t, dir, httpAddr, raftAddr, tc.args...)
		// /readyz can answer before the start line is written.
		logs := waitForLine(t, p.logs, serving)
		require.Contains(t, logs, tc.said, "%v", tc.args)
		require.Regexp(t, `msg="idem serving".* bucket-width=1h0m0s`, logs, "%v: the start logs the width in force", tc.args)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, string(b), `"bucket_width_ms":3600000`, "%v: node.json", tc.args)
		code, body := post(t, httpAddr, "/v1/claim", claimBody)
		require.Equal(t, 409, code, "%v: the node lost its record: %s", tc.args, body)
		p.cmd.Process.Signal(syscall.SIGTERM)
		require.NoError(t, p.wait())
	}
	// With node.json now right, the next start says nothing about it.
	p = start(t, dir, httpAddr, raftAddr)
	logs := waitForLine(t, p.logs, serving) // written after what the start says of node.json
	require.NotContains(t, logs, "fixed by its first write")
	require.Regexp(t, `msg="idem serving".* bucket-width=1h0m0s`, logs)
}

// A bucket width wider than the retention keeps expired records' space
// for up to a width beyond their window, for the data dir's life: said at
// start (an operator walk created a store with --bucket-width 100000h and
// heard nothing). The default width says nothing.
func TestWideBucketsAreSaidAtStart(t *testing.T) {
	wide := start(t, t.TempDir(), freePort(t), freePort(t), "--bucket-width", "48h")
	require.Eventually(t, func() bool {
		return strings.Contains(wide.logs.String(), `level=WARN msg="--bucket-width 48h0m0s is wider than the retention 24h0m0s`)
	}, 10*time.Second, 50*time.Millisecond, wide.logs.String())
	plain := start(t, t.TempDir(), freePort(t), freePort(t))
	code, body := post(t, plain.http, "/v1/claim", claimBody)
	require.Equal(t, 201, code, body)
	require.NotContains(t, waitForLine(t, plain.logs, serving), "is wider than the retention", "said before the start line, if at all")

	// No --bucket-width, a short retention: the default's width is named
	// as the default's, and the advice is a narrower one, not the default
	// (a chaos soak's nodes, with --retention 16m, were told of a
	// "--bucket-width 2h0m0s" nobody gave, and to take "e.g. the default").
	short := start(t, t.TempDir(), freePort(t), freePort(t), "--retention", "30m")
	logs := waitForLine(t, short.logs, serving)
	require.Contains(t, logs, `level=WARN msg="the bucket width 2h0m0s (--bucket-width's default) is wider than the retention 30m0s`)
	require.Contains(t, logs, "only a new cluster takes another, created with --bucket-width 30m0s or less")
	require.NotContains(t, logs, "e.g. the default")
}

// --min-free-disk 0 turns the disk guard off: the start says so, since
// nothing else did until the disk was full (the README walkthrough). The
// default says nothing.
func TestDiskGuardOffIsSaidAtStart(t *testing.T) {
	off := start(t, t.TempDir(), freePort(t), freePort(t), "--min-free-disk", "0")
	logs := waitForLine(t, off.logs, serving)
	require.Eventually(t, func() bool {
		return strings.Contains(off.logs.String(), `level=WARN msg="the disk guard is off (--min-free-disk 0)`)
	}, 10*time.Second, 50*time.Millisecond, logs)
	on := start(t, t.TempDir(), freePort(t), freePort(t))
	code, body := post(t, on.http, "/v1/claim", claimBody)
	require.Equal(t, 201, code, body)
	require.NotContains(t, on.logs.String(), "the disk guard is off")
}

// Bug: a --data-dir typo (/var/lib/idme beside /var/lib/idem) started a
// new, empty store as quietly as a first start: on a single node every
// key was free again and every retry ran again. The node still starts (a
// second store beside the first is legitimate) but warns, naming the
// store beside it; a start on the real dir, or a new node that joins, does
// not.
func TestNewStoreBesideAnotherWarns(t *testing.T) {
	root := t.TempDir()
	real, typo := filepath.Join(root, "idem"), filepath.Join(root, "idme")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, real, httpAddr, raftAddr)
	// The warning would come before the start line.
	require.NotContains(t, waitForLine(t, p.logs, serving), "NEW, EMPTY", "the first store of a parent")
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())

	p = start(t, typo, httpAddr, raftAddr)
	logs := waitForLine(t, p.logs, serving)
	require.Contains(t, logs, "NEW, EMPTY")
	require.Contains(t, logs, real+" holds a node's data")
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())

	p = start(t, real, httpAddr, raftAddr)
	require.NotContains(t, waitForLine(t, p.logs, serving), "NEW, EMPTY", "a restart on the real dir")
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())
	p = launch(t, filepath.Join(root, "n4"), httpAddr, raftAddr, "--join", "127.0.0.1:1")
	require.NotContains(t, waitForLine(t, p.logs, serving), "NEW, EMPTY", "a node that joins")
	p.cmd.Process.Kill()
	p.wait()

	// Among many, the closest names come first: n33 is a typo of n3.
	nodes := filepath.Join(root, "cluster-data")
	for _, n := range []string{"m1", "n1", "n2", "n3", "x9"} {
		require.NoError(t, os.MkdirAll(filepath.Join(nodes, n), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(nodes, n, "node.json"), []byte("{}"), 0o600))
	}
	p = start(t, filepath.Join(nodes, "n33"), httpAddr, raftAddr)
	logs = waitForLine(t, p.logs, serving)
	require.Contains(t, logs, "Beside it, "+filepath.Join(nodes, "n3")+", ")
	require.Contains(t, logs, "(the closest names; 2 more) each hold a node's data")
}

// Bug: --retention was checked against --bucket-width alone, not the
// width the data dir was created with. A data dir made with
// --bucket-width 1s and started again with --retention 2000h (and no
// --bucket-width: its default 2h makes that 1,000 widths) started, the
// first claim pinned 2000h (7.2 million buckets of 1s), and every claim
// and lookup probed them all, 0.15-0.3 s each, for as long as the cluster
// lived; PUT /v1/admin/retention refuses the same value. The start is now
// refused, whether the width comes from node.json or, without it, from
// the cluster's state.
func TestRetentionSpanIsCheckedAgainstTheDataDirsWidth(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--bucket-width", "1s", "--retention", "2m", "--allow-short-retention")
	// No claim (it would pin 2m, and the flag would then change nothing):
	// the width is fixed by the first entry the leader stamps.
	require.Eventually(t, func() bool {
		_, b := get(t, httpAddr, "/metrics")
		return strings.Contains(string(b), "\nidem_bucket_width_seconds 1\n")
	}, 10*time.Second, 50*time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	require.NoError(t, p.wait())

	serve := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, "serve", "--data-dir", dir, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--retention", "2000h").CombinedOutput()
		return string(out), err
	}
	out, err := serve()
	require.Error(t, err, "started: %s", out)
	require.Contains(t, out, "--retention 2000h0m0s is too long for the bucket width "+dir+" was created with, 1s")
	require.Contains(t, out, "give a --retention of at most 2h46m40s")
	require.NotContains(t, out, serving)

	path := filepath.Join(dir, "node.json")
	require.NoError(t, os.Rename(path, path+".aside"))
	out, err = serve()
	require.Error(t, err, "started: %s", out)
	require.Contains(t, out, "--retention 2000h0m0s is too long for the cluster's bucket width (fixed by its first write), 1s")
	require.NotContains(t, out, serving)

	// Within the span it starts, and the first claim pins that retention.
	p = start(t, dir, httpAddr, raftAddr, "--retention", "2h")
	waitForLine(t, p.logs, serving)
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, body)
	code, body = get(t, httpAddr, "/v1/config")
	require.Equal(t, 200, code, body)
	require.Contains(t, string(body), `"retention_seconds":7200`)
}

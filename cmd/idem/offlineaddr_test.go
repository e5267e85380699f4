package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOfflineRaftAddrsAreCheckedAsServeChecksThem: snapshot restore
// --raft-addr 127.0.0.1:99999 (or 0.0.0.0:7071) and recover --peers
// n1=127.0.0.1:99999 were accepted and written into the data dir's raft
// configuration, with a start command that idem serve then refused.
// Nothing is opened or written before the address is refused.
func TestOfflineRaftAddrsAreCheckedAsServeChecksThem(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:0", "0.0.0.0:7071", ":7071", "[::]:7071"} {
		dir := filepath.Join(t.TempDir(), "new")
		out, err := idemCmd(t, "snapshot", "restore", filepath.Join(t.TempDir(), "absent.snap"),
			"--data-dir", dir, "--node-id", "n1", "--raft-addr", addr)
		require.Equal(t, 2, exitCode(err), "restore --raft-addr %s:\n%s", addr, out)
		require.Contains(t, out, `--raft-addr "`+addr+`"`, out)
		_, statErr := os.Stat(dir)
		require.True(t, os.IsNotExist(statErr), "restore with a bad --raft-addr made %s", dir)

		out, err = idemCmd(t, "recover", "--data-dir", filepath.Join(t.TempDir(), "none"), "--node-id", "n1", "--peers", "n1="+addr)
		require.Equal(t, 2, exitCode(err), "recover --peers n1=%s:\n%s", addr, out)
		require.Contains(t, out, `--peers: raft address "`+addr+`" of n1`, out)
	}
}

// TestClusterAndKeysTimeoutMustBePositive: idem cluster status --timeout 0
// (the client commands' "0: never") and --timeout -1s called the node and
// failed with "context deadline exceeded", naming no flag.
func TestClusterAndKeysTimeoutMustBePositive(t *testing.T) {
	addr := "127.0.0.15:28999" // every case must be refused before a call
	for _, args := range [][]string{
		{"cluster", "status", "--addr", addr, "--timeout", "0"},
		{"cluster", "set-retention", "--addr", addr, "--retention", "48h", "--timeout", "-1s"},
		{"keys", "status", "--addr", addr, "--timeout", "0"},
	} {
		out, err := idemCmd(t, args...)
		require.Equal(t, 2, exitCode(err), "%v:\n%s", args, out)
		require.Contains(t, out, "--timeout", "%v", args)
		require.Contains(t, out, "must be positive", "%v", args)
		require.NotContains(t, out, "deadline exceeded", "%v", args)
	}
}

// TestSnapshotSaveRefusesADirectoryBeforeStreaming: snapshot save DIR
// --force streamed the whole snapshot, failed to rename it over DIR and
// left DIR.tmp-* behind; snapshot save "" said "got 1" FILE argument.
func TestSnapshotSaveRefusesADirectoryBeforeStreaming(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "backups")
	require.NoError(t, os.Mkdir(dir, 0o755))
	// Nothing listens at --addr: the directory must be refused before a call.
	out, err := idemCmd(t, "snapshot", "save", dir, "--force", "--addr", "127.0.0.15:28999")
	require.Equal(t, 2, exitCode(err), out)
	require.Contains(t, out, dir+" is a directory", out)
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the directory: no temporary file left")

	out, err = idemCmd(t, "snapshot", "save", "", "--addr", "127.0.0.15:28999")
	require.Equal(t, 2, exitCode(err), out)
	require.Contains(t, out, "FILE is empty", out)
}

// TestBenchChecksAddrAndHistBeforeTheRun: idem bench --addr ":" (or a port
// out of range) ran the whole load with every operation a transport error,
// and a --hist in a missing directory was refused only after the run.
func TestBenchChecksAddrAndHistBeforeTheRun(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", ":"}, `--addr ":" is not host:port`},
		{[]string{"--addr", "127.0.0.15:99999"}, `--addr "127.0.0.15:99999" is not host:port`},
		{[]string{"--addr", "127.0.0.15:28999", "--hist", filepath.Join(t.TempDir(), "absent", "h.svg")}, "--hist"},
	} {
		// A run of ten minutes: refused before it, the command ends at
		// once; run, it is killed after a minute and exits otherwise.
		out, err := idemCmdWithin(t, time.Minute, append([]string{"bench", "--duration", "10m", "--warmup", "0", "--quiet"}, tc.args...)...)
		require.Equal(t, 2, exitCode(err), "%v: refused before the run:\n%s", tc.args, out)
		require.Contains(t, out, tc.want, "%v", tc.args)
	}
}

// TestServeWarnsOfAnOpenTLSKey: idem serve warns, naming the flag, when
// --auth-file, --node-token-file or --encryption-key-file gives other users
// access (SECURITY.md), but loaded a --tls-key-file of mode 0644, the key
// that speaks raft to the cluster, without a word. The node is given an
// address it cannot bind (TEST-NET-1), so it stops right after loading TLS
// and opens no port.
func TestServeWarnsOfAnOpenTLSKey(t *testing.T) {
	dir := t.TempDir()
	out, err := idemCmd(t, "tls", "ca", "--dir", dir)
	require.NoError(t, err, out)
	out, err = idemCmd(t, "tls", "cert", "--dir", dir, "--name", "n1", "--ip", "192.0.2.1")
	require.NoError(t, err, out)
	key := filepath.Join(dir, "n1-key.pem")
	require.NoError(t, os.Chmod(key, 0o644))
	out, err = idemCmd(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--insecure",
		"--http-addr", "192.0.2.1:28901", "--raft-addr", "192.0.2.1:28902",
		"--tls-cert-file", filepath.Join(dir, "n1.pem"), "--tls-key-file", key, "--tls-ca-file", filepath.Join(dir, "idem-ca.pem"))
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, out, "TLS on", out)
	require.Contains(t, out, "--tls-key-file is readable by other users", out)
	require.Contains(t, out, "mode=-rw-r--r--", out)
}

// TestAdminCommandsTakeATokenFile: the client commands read a token from
// --token-file (SECURITY.md: keep tokens in a file of mode 0600), but the
// commands that need the operator's and admin's tokens (cluster, snapshot
// save, keys status, bench) refused the flag, leaving the command line or
// the environment. They take it now, with the client commands' checks,
// before any call.
func TestAdminCommandsTakeATokenFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.token")
	require.NoError(t, os.WriteFile(empty, []byte("# no token here\n\n"), 0o600))
	good := filepath.Join(dir, "ops.token")
	require.NoError(t, os.WriteFile(good, []byte("idem_abc\n"), 0o600))
	addr := "127.0.0.15:28999" // every case is refused before a call
	for _, cmd := range [][]string{
		{"cluster", "status", "--addr", addr},
		{"snapshot", "save", filepath.Join(dir, "b.snap"), "--addr", addr},
		{"keys", "status", "--addr", addr},
		{"bench", "--addr", addr, "--ops", "1"},
	} {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--token-file", filepath.Join(dir, "absent")}, "--token-file: open"},
			{[]string{"--token-file", empty}, "--token-file " + empty + " holds no token"},
			{[]string{"--token-file", good, "--auth-token", "x"}, "--auth-token and --token-file exclude each other"},
		} {
			args := append(append([]string{}, cmd...), tc.args...)
			out, err := idemCmd(t, args...)
			require.Equal(t, 2, exitCode(err), "%v:\n%s", args, out)
			require.Contains(t, out, tc.want, "%v", args)
		}
		out, err := idemCmd(t, append(append([]string{}, cmd[0]), "--help")...)
		require.NoError(t, err, out)
		require.Contains(t, out, "--token-file path", "%s --help", cmd[0])
	}
}

// TestBootstrapExpectThatCanNeverFormIsRefused: on a new data dir,
// --bootstrap-expect 1 with --join was silently ignored (the node joined):
// refused at start, naming the flags, before the data dir is made. A node
// with state ignores both flags and still starts with them.
// --bootstrap-expect 3 with a --join naming fewer than two other nodes
// waited for ever ("waiting for peers to bootstrap" every second) without
// saying why; it may still be bootstrapped by a peer whose --join names
// every node, so it starts, and says so.
func TestBootstrapExpectThatCanNeverFormIsRefused(t *testing.T) {
	self, raft := "127.0.0.15:28907", "127.0.0.15:28908" // never bound: refused first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bootstrap-expect", "1", "--join", "127.0.0.16:28907"}, "--bootstrap-expect 1 with --join"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		out, err := idemCmdWithin(t, 5*time.Second, append([]string{"serve", "--data-dir", dir, "--http-addr", self, "--raft-addr", raft}, tc.args...)...)
		require.Equal(t, 2, exitCode(err), "%v:\n%s", tc.args, out)
		require.Contains(t, out, tc.want, "%v", tc.args)
		require.NoDirExists(t, dir, "%v", tc.args)
	}
	ip := "127.0.0.11"
	http := freePortOn(t, ip)
	p := launch(t, filepath.Join(t.TempDir(), "data"), http, freePortOn(t, ip), "--bootstrap-expect", "3", "--join", http+","+freePortOn(t, ip))
	waitFor(t, 20*time.Second, "the note that this node never bootstraps by itself", func() (bool, string) {
		return strings.Contains(p.logs.String(), "--bootstrap-expect 3: --join names 1 other node(s)") &&
			strings.Contains(p.logs.String(), "waits for a node whose --join names every node"), ""
	})
}

// idemCmdWithin is idemCmd for a command that, when a check is missing,
// would run for ever (a node waiting for peers): it is killed after d.
func idemCmdWithin(t *testing.T, d time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out), err
}

// TestClaimHelpSaysTheFingerprintIsEven: claim --help said "2-128
// characters", and --fingerprint abc was then refused by the node as "hex
// of even length" (README's flag table says even too).
func TestClaimHelpSaysTheFingerprintIsEven(t *testing.T) {
	out, err := idemCmd(t, "claim", "--help")
	require.NoError(t, err, out)
	require.Contains(t, out, "an even number of hex characters")
}

// With no node at --addr, idem bench spent its whole run on "connection
// refused" errors (about 430,000 in 5 s), printed "correctness: ok", and
// only then said nothing was measured (a README walk). It now asks each
// node's /healthz first and stops at once, naming the address.
func TestBenchWithoutANodeStopsBeforeTheRun(t *testing.T) {
	addr := freePort(t)
	out, err := idemCmdWithin(t, time.Minute, "bench", "--addr", addr, "--duration", "10m", "--warmup", "0", "--quiet")
	require.Equal(t, 1, exitCode(err), "%s", out)
	require.Contains(t, out, "--addr "+addr+": the node's /healthz failed")
	require.Contains(t, out, "start a node there (idem serve)")
	require.Contains(t, out, "nothing was run")
	require.NotContains(t, out, "correctness")
}

// One node of several down: the run goes on with those that answer (the
// driver leaves a node it cannot reach), naming the one that did not.
func TestBenchWithOneNodeDownNamesItAndRuns(t *testing.T) {
	down := freePort(t)
	store := startStore(t)
	out, err := idemCmdWithin(t, time.Minute, "bench", "--addr", down+","+store.http, "--ops", "20", "--concurrency", "2", "--warmup", "0", "--quiet")
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "--addr "+down+": the node's /healthz failed")
	require.Contains(t, out, "the run goes on with the nodes that answered")
	require.Contains(t, out, "correctness: ok")
}

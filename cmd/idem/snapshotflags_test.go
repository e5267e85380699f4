package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The snapshot subcommands share one flag set, and a flag of another
// subcommand was ignored: `snapshot save FILE --data-dir DIR`, read as
// "back up that stopped node's data dir", saved whatever node answered at
// --addr (127.0.0.1:7070 by default) instead. Each is refused, naming the
// subcommand it belongs to, before anything is asked or written.
func TestSnapshotRefusesAnotherSubcommandsFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	addr := "127.0.0.1:1" // nothing is asked: a closed port would answer connection refused
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "save", file, "--addr", addr, "--data-dir", filepath.Join(dir, "n1")},
			"idem snapshot save: --data-dir is a flag of restore, not of save: nothing was done; save never reads a data dir: it asks a running node of the cluster for its state, at --addr (default 127.0.0.1:7070) (see idem snapshot --help)"},
		{[]string{"snapshot", "save", file, "--addr", addr, "--json"},
			"idem snapshot save: --json is a flag of inspect, not of save: nothing was done (see idem snapshot --help)"},
		{[]string{"snapshot", "inspect", file, "--addr", addr},
			"idem snapshot inspect: --addr is a flag of save, not of inspect: nothing was done (see idem snapshot --help)"},
		{[]string{"snapshot", "restore", file, "--data-dir", filepath.Join(dir, "r"), "--node-id", "n1", "--raft-addr", "127.0.0.1:7071", "--addr", addr},
			"idem snapshot restore: --addr is a flag of save, not of restore: nothing was done (see idem snapshot --help)"},
		{[]string{"snapshot", "inspect", file, "--force"},
			"idem snapshot inspect: --force is a flag of save and restore, not of inspect: nothing was done (see idem snapshot --help)"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Equal(t, tc.want, strings.TrimSpace(stderr.String()), "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
		require.NoFileExists(t, file)
		require.NoDirExists(t, filepath.Join(dir, "r"))
	}
}

// Ctrl-C in a snapshot save before the node's stream began said only
// `Get "http://…/v1/admin/snapshot": interrupt signal received`. It says
// nothing was saved, and FILE (here one kept from an earlier save, given
// --force) is as it was.
func TestSnapshotSaveInterruptedSaysNothingWasSaved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the operator's Ctrl-C, while the node prepares its stream
		<-r.Context().Done()
	}))
	defer node.Close()
	file := filepath.Join(t.TempDir(), "b.snap")
	require.NoError(t, os.WriteFile(file, []byte("an earlier backup"), 0o600))
	addr := strings.TrimPrefix(node.URL, "http://")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"snapshot", "save", file, "--addr", addr, "--force"}, &stdout, &stderr)
	require.Equal(t, 1, code, stderr.String())
	require.Equal(t, "idem snapshot save: interrupted before "+addr+" sent the snapshot: nothing was saved ("+file+" is as it was)", strings.TrimSpace(stderr.String()))
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "an earlier backup", string(b))
	left, _ := filepath.Glob(file + ".tmp-*")
	require.Empty(t, left)
}

// idem cluster and idem keys share a flag set among their subcommands too,
// and a flag of another one was ignored: keys generate --id k2
// --encryption-key-file keys.json, read as rotation's "add the new key to
// the file", printed a new key file, secret key and all, to the terminal
// and left keys.json as it was; cluster status --id n3 showed every node.
func TestClusterAndKeysRefuseAnotherSubcommandsFlag(t *testing.T) {
	addr := "127.0.0.1:1" // nothing is asked
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "generate", "--id", "k2", "--encryption-key-file", "keys.json"},
			"idem keys generate: --encryption-key-file is a flag of status, not of generate: nothing was done (see idem keys --help)"},
		{[]string{"keys", "status", "--addr", addr, "--out", "keys.json"},
			"idem keys status: --out is a flag of generate, not of status: nothing was done (see idem keys --help)"},
		{[]string{"cluster", "status", "--addr", addr, "--id", "n3"},
			"idem cluster status: --id is a flag of join, remove and transfer-leadership, not of status: nothing was done (see idem cluster --help)"},
		{[]string{"cluster", "set-retention", "--addr", addr, "--retention", "48h", "--force"},
			"idem cluster set-retention: --force is a flag of join and remove, not of set-retention: nothing was done (see idem cluster --help)"},
		{[]string{"cluster", "remove", "--addr", addr, "--id", "n3", "--retention", "48h"},
			"idem cluster remove: --retention is a flag of set-retention, not of remove: nothing was done (see idem cluster --help)"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		require.Equal(t, tc.want, strings.TrimSpace(stderr.String()), "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
	}
}

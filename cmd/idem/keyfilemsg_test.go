package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A key file that is not there, or not a key file, was refused with the
// package's name in the middle of the line: "idem serve:
// --encryption-key-file: raftfsm: bad encryption key file: open keys.json:
// no such file or directory", read as an internal error, where --auth-file's
// refusal says only what is wrong with the file. Neither serve nor keys
// status says "raftfsm:" now.
func TestKeyFileRefusalDoesNotNameThePackage(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "keys.json")
	for _, args := range [][]string{
		{"serve", "--data-dir", filepath.Join(dir, "d"), "--http-addr", freePort(t), "--raft-addr", freePort(t), "--encryption-key-file", missing},
		{"keys", "status", "--addr", "127.0.0.1:1", "--encryption-key-file", missing},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		require.NotEqual(t, 0, code, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		want := "idem " + args[0] + ": --encryption-key-file: bad encryption key file: open " + missing + ": no such file or directory"
		if args[0] == "keys" {
			want = "idem keys status: --encryption-key-file: bad encryption key file: open " + missing + ": no such file or directory"
		}
		require.Equal(t, want, lines[len(lines)-1], "%v", args)
	}
}

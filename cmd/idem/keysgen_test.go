package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// idem keys generate said "wrote key" before the key file was synced: a
// node started with it fsyncs what it encrypts into its raft log at once,
// so a machine crash could keep the records and lose the only key that
// reads them. A key file that cannot be synced is now no key file: it is
// removed (left, every retry refused to overwrite it and idem serve
// refused it), and the command fails saying so; run again, it writes one.
func TestKeysGenerateSyncsTheKeyFileOrWritesNone(t *testing.T) {
	out := filepath.Join(t.TempDir(), "keys.json")
	old := syncKeyFile
	t.Cleanup(func() { syncKeyFile = old })

	syncKeyFile = func(*os.File) error { return errors.New("input/output error") }
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, keysGenerate("k1", out, &stdout, &stderr))
	require.Contains(t, stderr.String(), "input/output error")
	require.Contains(t, stderr.String(), "no key was written")
	require.NotContains(t, stderr.String(), "wrote key")
	require.NoFileExists(t, out)

	synced := false
	syncKeyFile = func(f *os.File) error { synced = true; return f.Sync() }
	stderr.Reset()
	require.Equal(t, 0, keysGenerate("k1", out, &stdout, &stderr), stderr.String())
	require.True(t, synced, "the key file was not synced before it was reported written")
	require.Contains(t, stderr.String(), `wrote key "k1"`)
	require.FileExists(t, out)
}

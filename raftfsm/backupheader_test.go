package raftfsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// withHeader rewrites a backup's header with edit, checksum and all.
func withHeader(t *testing.T, data []byte, edit func(h map[string]any)) []byte {
	t.Helper()
	hl := binary.BigEndian.Uint32(data[12:16])
	h := map[string]any{}
	require.NoError(t, json.Unmarshal(data[16:16+hl], &h))
	edit(h)
	hb, err := json.Marshal(h)
	require.NoError(t, err)
	out := append(bytes.Clone(data[:12]), binary.BigEndian.AppendUint32(nil, uint32(len(hb)))...)
	out = append(out, hb...)
	out = append(out, data[16+hl:len(data)-sha256.Size]...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

// A backup's header rewritten with a valid checksum (another bucket width
// and scope than its data's) was shown by inspect as the backup's, and
// written by restore into node.json (serve then corrected it from the
// state, with two warnings). The header's settings must be the data's.
func TestBackupHeaderMustAgreeWithItsData(t *testing.T) {
	n := mustNode(t)
	fill(t, n, 5)
	data := backupOf(t, n)
	_, err := VerifyBackup(bytes.NewReader(withHeader(t, data, func(map[string]any) {})))
	require.NoError(t, err, "the header rewritten as it was")
	for name, edit := range map[string]func(h map[string]any){
		"bucket width": func(h map[string]any) { h["bucket_width_ms"] = 3600000 },
		"scope":        func(h map[string]any) { h["scope"] = "principal" },
	} {
		t.Run(name, func(t *testing.T) {
			bad := withHeader(t, data, edit)
			_, err := VerifyBackup(bytes.NewReader(bad))
			require.ErrorIs(t, err, ErrBackup)
			require.ErrorContains(t, err, "header says "+name)
			_, err = RestoreBackup(bytes.NewReader(bad), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
			require.ErrorIs(t, err, ErrBackup)
			require.ErrorContains(t, err, "header says "+name)
		})
	}
	// A header of a release that wrote no scope is read as before.
	_, err = VerifyBackup(bytes.NewReader(withHeader(t, data, func(h map[string]any) { delete(h, "scope") })))
	require.NoError(t, err)
}

// A backup compressed by a cron job or logrotate (gzip, zstd, xz, bzip2)
// was refused only as starting with ".......k", and a node's own raft
// snapshot file as starting with "IDEMLIVE": neither said what the file
// was nor what to do. Both are named now, with the way out.
func TestNotABackupSaysWhatTheFileIs(t *testing.T) {
	for _, tc := range []struct{ head, want string }{
		{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "it is gzip-compressed; decompress it (gunzip -k FILE)"},
		{"\x28\xb5\x2f\xfd\x00\x00\x00\x00\x00\x00", "it is zstd-compressed"},
		{"\xfd7zXZ\x00\x00\x00\x00\x00", "it is xz-compressed"},
		{"BZh91AY&SY\x00\x00", "it is bzip2-compressed"},
		{"IDEMLIVE\x00\x00\x00\x00\x00\x00\x05\xc6", "a file of a node's raft snapshots (snapshots/*/state.bin), not a backup"},
	} {
		data := append([]byte(tc.head), make([]byte, 64)...)
		_, err := VerifyBackup(bytes.NewReader(data))
		require.ErrorIs(t, err, ErrBackup)
		require.ErrorContains(t, err, "not an idem backup")
		require.ErrorContains(t, err, tc.want)
	}
}

// A backup whose state and header both claim applied index 2^64-1 (valid
// checksums, a hostile or mangled file) was restored, "the raft log goes
// on at index 0", and the node panicked at every start ("log not found").
// An applied index beyond any a cluster reaches is refused up front.
func TestBackupBeyondAnyIndexIsRefused(t *testing.T) {
	for _, applied := range []uint64{^uint64(0), 1<<62 + 1} {
		db, err := engine.Open(filepath.Join(t.TempDir(), "fsm"), engine.Options{})
		require.NoError(t, err)
		require.NoError(t, db.Begin().Commit(applied))
		snap, err := db.Snapshot()
		require.NoError(t, err)
		h, err := NewBackupHeader(snap, "n1")
		require.NoError(t, err)
		var b bytes.Buffer
		_, err = WriteBackup(&b, h, snap)
		require.NoError(t, err)
		snap.Close()
		require.NoError(t, db.Close())

		_, err = VerifyBackup(bytes.NewReader(b.Bytes()))
		require.ErrorIs(t, err, ErrBackup)
		require.ErrorContains(t, err, "beyond any a cluster reaches")
		_, err = RestoreBackup(bytes.NewReader(b.Bytes()), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
		require.ErrorIs(t, err, ErrBackup, "applied %d", applied)
		require.ErrorContains(t, err, "beyond any a cluster reaches")
	}
}

package raftfsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// freeRaftAddr is a free port on the test's address, given to no other
// test of the process (testRaftListener).
func freeRaftAddr(t *testing.T) string {
	t.Helper()
	ln := testRaftListener(t)
	defer ln.Close()
	return ln.Addr().String()
}

// backupOf takes a backup of n into memory.
func backupOf(t *testing.T, n *Node) []byte {
	t.Helper()
	snap, err := n.Backup(context.Background())
	require.NoError(t, err)
	defer snap.Close()
	h, err := NewBackupHeader(snap, n.Self().ID)
	require.NoError(t, err)
	var buf bytes.Buffer
	written, err := WriteBackup(&buf, h, snap)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), written)
	return buf.Bytes()
}

func scopeN(i int) engine.Scope {
	return engine.Scope{Principal: "p", Endpoint: "POST /x", Key: fmt.Sprintf("k%03d", i)}
}

// fill claims n scopes and completes the even ones.
func fill(t *testing.T, n *Node, count int) map[engine.Scope]*engine.Record {
	t.Helper()
	out := map[engine.Scope]*engine.Record{}
	for i := range count {
		s := scopeN(i)
		res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeClaimed, res.Outcome)
		if i%2 == 0 {
			resp := &engine.Response{Status: 201, ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"i":%d}`, i))}
			_, err := n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, resp)
			require.NoError(t, err)
		}
		r, ok, err := n.Lookup(context.Background(), s, false, true)
		require.NoError(t, err)
		require.True(t, ok)
		out[s] = r
	}
	return out
}

// requireRecords checks that m serves every record of want, as fill stored it.
func requireRecords(t *testing.T, m *Node, want map[engine.Scope]*engine.Record) {
	t.Helper()
	for s, r := range want {
		got, ok, err := m.Lookup(context.Background(), s, false, true)
		require.NoError(t, err)
		require.True(t, ok, "%v lost", s)
		require.Equal(t, r, got)
	}
}

func TestBackupRestoreContinuesAboveTheSnapshotIndex(t *testing.T) {
	n := mustNode(t)
	want := fill(t, n, 40)
	data := backupOf(t, n)

	info, err := VerifyBackup(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, int64(40), info.Header.Records)
	require.Equal(t, int64(40), info.Stream.Records)
	require.Equal(t, n.db.Meta().Applied, info.Header.AppliedIndex)
	require.Equal(t, int64(len(data)), info.Bytes)
	require.Len(t, info.SHA256, 64)
	require.Equal(t, "endpoint", info.Header.Scope)
	require.Equal(t, engine.ScopeEndpoint, info.Stream.Meta.Scope)

	dir := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, os.Mkdir(dir, 0o755))
	addr := freeRaftAddr(t)
	// The lost cluster goes on after the backup, and gives out fencing
	// tokens (raft indexes) above the backup's applied index J.
	var lost uint64
	for i := range 5 {
		_, idx, err := n.Claim(engine.ClaimArgs{Scope: scopeN(2000 + i), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		lost = idx
	}
	// Restored two hours after the backup.
	now := time.UnixMilli(info.Header.ClusterTimeMs).Add(2 * time.Hour)
	rinfo, err := RestoreBackup(bytes.NewReader(data), dir, RestoreOptions{NodeID: "r1", RaftAddr: addr, Now: now})
	require.NoError(t, err)
	J := info.Header.AppliedIndex
	require.NotZero(t, J)
	require.Greater(t, lost, J)
	R := rinfo.Stream.Meta.Applied
	require.Equal(t, uint64(now.Unix()+restoreMarginSeconds)*restoreIndexRate, R, "the restored state and log start far above J")
	require.Equal(t, R, RestoredIndex(J, now))

	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr = "r1", dir, addr
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, m.NowMs(), info.Header.ClusterTimeMs, "cluster time went back")
	requireRecords(t, m, want)
	// New writes are applied, above J: a log restarted at index 1 would
	// have them skipped as already applied.
	res, idx, err := m.Claim(engine.ClaimArgs{Scope: scopeN(1000), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	// Above R, and so above every token the lost cluster gave out after
	// the backup: continued at J+1, the restored cluster gave out the lost
	// one's numbers again, and tokens of one scope no longer ordered by
	// attempt across the restore.
	require.Greater(t, idx, R)
	require.Greater(t, idx, lost)
	res, _, err = m.Claim(engine.ClaimArgs{Scope: scopeN(0), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeReplay, res.Outcome)
	require.Equal(t, want[scopeN(0)].Response, res.Record.Response)

	// And it keeps doing so across a restart.
	m = reopen(t, m)
	res, _, err = m.Claim(engine.ClaimArgs{Scope: scopeN(1001), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	_, ok, err := m.Lookup(context.Background(), scopeN(1000), false, true)
	require.NoError(t, err)
	require.True(t, ok)
}

// Bug (an operator walk): restored from the newest backup, then, minutes
// later, from an older one (the newest held the damage that called for a
// restore), the second cluster's log started below the first's: its start
// was relative to the backup's index (J plus an hour's worth). It gave out
// the first restored cluster's tokens again, byte for byte, so a fence
// that had seen the first cluster's attempts refused the new ones, and a
// worker of the first still holding its token completed the second's.
func TestRestoreOfAnOlderBackupAfterANewerGoesOnAboveIt(t *testing.T) {
	n := mustNode(t)
	fill(t, n, 5)
	older := backupOf(t, n)
	for i := range 50 {
		_, _, err := n.Claim(engine.ClaimArgs{Scope: scopeN(3000 + i), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
	}
	newer := backupOf(t, n)
	oinfo, err := VerifyBackup(bytes.NewReader(older))
	require.NoError(t, err)
	ninfo, err := VerifyBackup(bytes.NewReader(newer))
	require.NoError(t, err)
	require.Greater(t, ninfo.Header.AppliedIndex, oinfo.Header.AppliedIndex+40)

	claimOn := func(data []byte, id string, now time.Time, claims int) uint64 {
		dir := filepath.Join(t.TempDir(), id)
		addr := freeRaftAddr(t)
		_, err := RestoreBackup(bytes.NewReader(data), dir, RestoreOptions{NodeID: id, RaftAddr: addr, Now: now})
		require.NoError(t, err)
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.RaftAddr = id, dir, addr
		m, err := Open(cfg)
		require.NoError(t, err)
		defer m.Close()
		require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
		var last uint64
		for i := range claims {
			_, idx, err := m.Claim(engine.ClaimArgs{Scope: scopeN(5000 + i), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
			require.NoError(t, err)
			last = idx
		}
		return last
	}
	now := time.UnixMilli(ninfo.Header.ClusterTimeMs).Add(10 * time.Minute)
	first := claimOn(newer, "r1", now, 20)
	second := claimOn(older, "r2", now.Add(5*time.Minute), 1)
	require.Greater(t, second, first, "the second restored cluster gave out the first one's tokens again")
}

func TestBadBackupsAreRefused(t *testing.T) {
	n := mustNode(t)
	fill(t, n, 10)
	data := backupOf(t, n)
	hl := int(data[12])<<24 | int(data[13])<<16 | int(data[14])<<8 | int(data[15])
	flipBit := func(at int, bit byte) []byte {
		b := bytes.Clone(data)
		b[at] ^= bit
		return b
	}
	flip := func(at int) []byte { return flipBit(at, 0x01) }
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":                 {nil, "truncated"},
		"magic only":            {data[:8], "truncated"},
		"truncated header":      {data[:20], "truncated"},
		"truncated stream":      {data[:len(data)/2], "truncated"},
		"no end of frames":      {data[:len(data)-32-4], "truncated"},
		"truncated checksum":    {data[:len(data)-5], "truncated"},
		"wrong magic":           {append([]byte("IDEMSNP1"), data[8:]...), "not an idem backup"},
		"future version":        {flip(11), "format version"},
		"flipped header byte":   {flip(16 + hl/2), ""},
		"flipped stream byte":   {flip(16 + hl + 4 + 100), ""},
		"flipped last data":     {flip(len(data) - 32 - 5), ""},
		"flipped checksum byte": {flip(len(data) - 1), "SHA-256 mismatch"},
		"data after checksum":   {append(bytes.Clone(data), 0), "after the checksum"},
		// A frame's length with a bit flipped: past the file's end (one
		// MiB more), it was called truncated, though the file was whole.
		"frame length past the file's end": {flipBit(16+hl+1, 0x10), "damaged: the frame at offset " + strconv.Itoa(16+hl) + " says it holds"},
		"frame length past the limit":      {flipBit(16+hl, 0x01), "damaged file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyBackup(bytes.NewReader(tc.data))
			require.ErrorIs(t, err, ErrBackup)
			require.ErrorContains(t, err, tc.want)
			if strings.HasPrefix(name, "frame length") {
				require.NotContains(t, err.Error(), "truncated")
			}
			dir := t.TempDir()
			_, err = RestoreBackup(bytes.NewReader(tc.data), dir, RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
			require.ErrorIs(t, err, ErrBackup)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A one-node cluster that added an absent voter has lost its quorum for
// good (two voters, one alive). Recover rewrites its configuration to
// itself alone; it then leads again with every record.
func TestRecoverOneSurvivor(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.ApplyTimeout = 500 * time.Millisecond })
	want := fill(t, n, 20)
	n.raft.AddVoter("ghost", "127.0.0.1:1", 0, 500*time.Millisecond).Error() // committed or not, quorum is lost
	cfg := n.cfg
	require.NoError(t, n.Close())

	before, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Len(t, before.Configuration, 2, "%+v", before.Configuration)

	_, err = Recover(cfg.DataDir, "n1", []Peer{{ID: "other", RaftAddr: "127.0.0.1:2"}}, nil)
	require.ErrorContains(t, err, "must include this node")
	addr := freeRaftAddr(t)
	st, err := Recover(cfg.DataDir, "n1", []Peer{{ID: "n1", RaftAddr: addr}}, nil)
	require.NoError(t, err)
	require.Equal(t, before.Applied, st.Applied)
	after, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Equal(t, []Peer{{ID: "n1", RaftAddr: addr, Suffrage: "Voter"}}, after.Configuration)
	require.GreaterOrEqual(t, after.Applied, before.Applied)

	cfg.RaftAddr = addr
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	requireRecords(t, m, want)
	res, _, err := m.Claim(engine.ClaimArgs{Scope: scopeN(500), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
}

// A state no command ever reached (applied index 0) restores, and its log
// goes on above RestoredIndex as any other's.
func TestRestoreOfUntouchedState(t *testing.T) {
	db, err := engine.Open(t.TempDir(), engine.Options{})
	require.NoError(t, err)
	snap, err := db.Snapshot()
	require.NoError(t, err)
	h, err := NewBackupHeader(snap, "n1")
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = WriteBackup(&buf, h, snap)
	require.NoError(t, err)
	snap.Close()
	require.NoError(t, db.Close())
	require.Zero(t, h.AppliedIndex)
	require.Empty(t, h.Scope)

	dir := t.TempDir()
	addr := freeRaftAddr(t)
	_, err = RestoreBackup(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{NodeID: "e1", RaftAddr: addr})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftAddr = "e1", dir, addr
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	res, idx, err := m.Claim(engine.ClaimArgs{Scope: scopeN(1), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	require.Greater(t, idx, uint64(restoreMarginSeconds*restoreIndexRate))
}

// A node whose state is past its raft log's end (it installed a leader's
// snapshot, state J above the snapshot's index, and stopped before the
// entries up to J arrived) is recovered with its log extended to J: the
// recovered cluster's new entries then land above J instead of being
// skipped as already applied.
func TestRecoverStatePastTheLogsEnd(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.TickInterval, c.SweepInterval = time.Hour, time.Hour })
	want := fill(t, n, 10)
	cfg := n.cfg
	require.NoError(t, n.Close())
	o, err := openOffline(cfg.DataDir, nil)
	require.NoError(t, err)
	st, _, err := o.state()
	require.NoError(t, err)
	require.NoError(t, o.logs.DeleteRange(st.LastIndex-8, st.LastIndex))
	require.NoError(t, o.close())
	before, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.Greater(t, before.Applied, before.LastIndex, "the test needs a state past the log")

	addr := freeRaftAddr(t)
	_, err = Recover(cfg.DataDir, "n1", []Peer{{ID: "n1", RaftAddr: addr}}, nil)
	require.NoError(t, err)
	after, err := ReadOfflineState(cfg.DataDir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after.LastIndex, before.Applied)

	cfg.RaftAddr = addr
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
	res, idx, err := m.Claim(engine.ClaimArgs{Scope: scopeN(700), Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeClaimed, res.Outcome)
	require.Greater(t, idx, before.Applied)
	requireRecords(t, m, want)
}

// RestoredIndex reads the restoring clock, not the backup's cluster time
// (a backup with none, of a state no command reached, jumped the seconds
// since 1970 from J), and stays a margin above J whatever the clock says.
func TestRestoredIndexFollowsTheClockAboveJ(t *testing.T) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	margin := uint64(restoreMarginSeconds * restoreIndexRate)
	require.Equal(t, uint64(now.Unix())*restoreIndexRate+margin, RestoredIndex(7, now))
	require.Equal(t, uint64(now.Unix())*restoreIndexRate+margin, RestoredIndex(0, now))
	big := uint64(now.Unix())*restoreIndexRate + 5*margin
	require.Equal(t, big+margin, RestoredIndex(big, now), "a state above the clock's reading")
	require.Equal(t, 7+margin, RestoredIndex(7, time.Unix(-5, 0)), "a clock before 1970")
	require.Less(t, RestoredIndex(7, now), uint64(1)<<53, "exact as a float64 metric")
}

// A recover stopped part-way (killed before it changed anything, or after
// it rewrote the configuration and before it recorded whom it left out)
// leaves recovering.json: a plain start refuses the data dir and names the
// command that finishes the work, and running it again does.
func TestUnfinishedRecoverIsRefusedUntilItIsRunAgain(t *testing.T) {
	for _, step := range []string{"marked", "rewritten"} {
		t.Run(step, func(t *testing.T) {
			n := mustNode(t, func(c *Config) { c.ApplyTimeout = 500 * time.Millisecond })
			want := fill(t, n, 10)
			n.raft.AddVoter("ghost", "127.0.0.1:1", 0, 500*time.Millisecond).Error() // quorum is lost
			cfg := n.cfg
			require.NoError(t, n.Close())

			addr := freeRaftAddr(t)
			peers := []Peer{{ID: "n1", RaftAddr: addr}}
			stopped := errors.New("killed at " + step)
			recoverHook = func(s string) error {
				if s == step {
					return stopped
				}
				return nil
			}
			_, err := Recover(cfg.DataDir, "n1", peers, nil)
			recoverHook = func(string) error { return nil }
			require.ErrorIs(t, err, stopped)

			st, err := ReadOfflineState(cfg.DataDir)
			require.NoError(t, err)
			require.NotNil(t, st.Unfinished)
			require.Equal(t, peers, st.Unfinished.Peers)

			cfg.RaftAddr = addr
			_, err = Open(cfg)
			require.ErrorIs(t, err, ErrRecoverUnfinished)
			require.ErrorContains(t, err, "idem recover --data-dir "+cfg.DataDir+" --node-id n1 --peers n1="+addr+" --yes")

			_, err = Recover(cfg.DataDir, "n1", peers, nil)
			require.NoError(t, err)
			st, err = ReadOfflineState(cfg.DataDir)
			require.NoError(t, err)
			require.Nil(t, st.Unfinished)
			require.Equal(t, []Peer{{ID: "n1", RaftAddr: addr, Suffrage: "Voter"}}, st.Configuration)
			// The member the recovery leaves out is recorded, to be told
			// it is superseded, even by a run after the configuration was
			// rewritten (which finds only the new one in the data dir).
			rec, err := readRecoveryRecord(cfg.DataDir)
			require.NoError(t, err)
			require.NotNil(t, rec)
			require.Equal(t, []string{"ghost"}, rec.LeftOut)
			m, err := Open(cfg)
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			require.Eventually(t, m.IsLeader, 10*time.Second, 10*time.Millisecond)
			requireRecords(t, m, want)
		})
	}
}

// A start whose raft log holds many entries above the newest snapshot was
// silent while raft read them all (seconds, before the node listens): it
// says so first, with how many.
func TestStartSaysItReadsALongLog(t *testing.T) {
	defer func(v uint64) { logScanNote = v }(logScanNote)
	logScanNote = 20
	n := mustNode(t)
	fill(t, n, 30)
	cfg := n.cfg
	require.NoError(t, n.Close())

	var logs logBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.Contains(t, logs.String(), "reading the raft log's entries above the newest snapshot before raft starts")
	require.Regexp(t, `entries=(3\d|4\d)\b`, logs.String())

	// Fewer than that: nothing said.
	logScanNote = 1000
	require.NoError(t, m.Close())
	logs = logBuffer{}
	m, err = Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.NotContains(t, logs.String(), "reading the raft log's entries")
}

// PeekBackupMembers finds in a backup's end the members its state records,
// as a whole restore does, and none in a file that is not a backup.
func TestPeekBackupMembersFindsTheMembers(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.HTTPAdvertise = "127.0.0.1:1" })
	require.Eventually(t, n.Registered, 10*time.Second, 10*time.Millisecond)
	fill(t, n, 10)
	data := backupOf(t, n)
	got := PeekBackupMembers(bytes.NewReader(data), int64(len(data)))
	info, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	require.NotEmpty(t, info.Members)
	require.ElementsMatch(t, info.Members, got)
	require.Empty(t, PeekBackupMembers(bytes.NewReader(data[:len(data)/3]), int64(len(data)/3)))
	require.Empty(t, PeekBackupMembers(strings.NewReader("not a backup"), 12))
}

// Bytes shaped as a member entry inside a stored response (a tenant's,
// on a node without encryption at rest) are not taken for one: the peek
// would have probed the address they name before a restore and, finding
// anything listening there, refused it as "that cluster is running".
func TestPeekBackupMembersIgnoresAnEntryInsideARecord(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.HTTPAdvertise = "127.0.0.1:1" })
	require.Eventually(t, n.Registered, 10*time.Second, 10*time.Millisecond)
	fill(t, n, 10)
	key := []byte("m/x/node/evil")
	val := []byte(`{"id":"evil","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:22"}`)
	forged := append([]byte{byte(len(key))}, key...)
	forged = binary.AppendUvarint(forged, uint64(len(val)))
	forged = append(forged, val...)
	for i, body := range [][]byte{forged, append(append([]byte(nil), forged...), forged...), append(forged, "tail"...)} {
		s := engine.Scope{Principal: "zz-tenant", Endpoint: "e", Key: fmt.Sprint("forged-", i)}
		res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
		require.NoError(t, err)
		_, err = n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, &engine.Response{Status: 200, ContentType: "application/octet-stream", Body: body})
		require.NoError(t, err)
	}
	data := backupOf(t, n)
	require.True(t, bytes.Contains(data, forged), "the forged entry is in the backup as stored")
	got := PeekBackupMembers(bytes.NewReader(data), int64(len(data)))
	info, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	require.NotEmpty(t, got)
	require.ElementsMatch(t, info.Members, got)
}

// A backup whose state holds far more node/ values than any cluster (a
// damaged or hostile file: a real one holds a few hundred bytes per
// member) was restored with every one of them held in memory at once,
// to read the members' addresses. Past engine.MaxStreamNamedBytes, as
// idem snapshot inspect does, the restore refuses it.
func TestRestoreBoundsTheMembersItReads(t *testing.T) {
	n := mustNode(t)
	big := bytes.Repeat([]byte("x"), 1<<20)
	for i := range engine.MaxStreamNamedBytes>>20 + 1 {
		txn := n.db.Begin()
		txn.SetNamed(fmt.Sprintf("node/n%03d", i), big)
		require.NoError(t, txn.Commit(0))
	}
	data := backupOf(t, n)
	_, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.ErrorIs(t, err, ErrBackup)
	require.ErrorContains(t, err, "take more than 64 MiB")
}

// A principal's name is stored in plain text, encrypted at rest or not,
// in its key count's key ("q/" and the name), which sorts after every
// member entry: bytes shaped as one in a name (printable, as the API
// takes) were the last run the peek saw, taken for the members alone.
func TestPeekBackupMembersIgnoresAnEntryInsideAPrincipal(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.HTTPAdvertise = "127.0.0.1:1" })
	require.Eventually(t, n.Registered, 10*time.Second, 10*time.Millisecond)
	fill(t, n, 10)
	id := strings.Repeat("e", 39)
	key := []byte("m/x/node/" + id)
	val := []byte(`{"id":"` + id + `","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:22"}`)
	require.True(t, len(key) >= 0x20 && len(key) < 0x7f && len(val) >= 0x20 && len(val) < 0x7f, "printable lengths")
	forged := append([]byte{byte(len(key))}, key...)
	forged = binary.AppendUvarint(forged, uint64(len(val)))
	forged = append(forged, val...)
	s := engine.Scope{Principal: string(forged), Endpoint: "e", Key: "k"}
	res, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	_, err = n.Complete(engine.TokenArgs{Scope: s, Token: res.Record.Token}, &engine.Response{Status: 200, ContentType: "text/plain", Body: []byte("ok")})
	require.NoError(t, err)
	data := backupOf(t, n)
	got := PeekBackupMembers(bytes.NewReader(data), int64(len(data)))
	info, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	for _, m := range got {
		require.NotEqual(t, id, m.ID, "an entry forged in a principal's name was taken for a member")
	}
	require.Subset(t, info.Members, got)
}

// The bound is on every named value, as inspect's is (docs/BACKUP.md: a
// state holding more than 64 MiB of them, members' addresses or key-use
// counters, is refused by inspect and by restore): restore applied it to
// the members' entries alone, taking a backup inspect refuses, whose
// values the restored node then read whole at start (key use).
func TestRestoreBoundsEveryNamedValue(t *testing.T) {
	n := mustNode(t)
	big := bytes.Repeat([]byte("x"), 1<<20)
	for i := range engine.MaxStreamNamedBytes>>20 + 1 {
		txn := n.db.Begin()
		txn.SetNamed(fmt.Sprintf("%s%016x/k%03d", keyUsePrefix, i, i), big)
		require.NoError(t, txn.Commit(0))
	}
	data := backupOf(t, n)
	_, err := VerifyBackup(bytes.NewReader(data))
	require.ErrorContains(t, err, "take more than 64 MiB", "inspect refuses it")
	_, err = RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.ErrorIs(t, err, ErrBackup)
	require.ErrorContains(t, err, "take more than 64 MiB")
}

// A bucket's quota key ("b", the bucket, "/q/" and the principal's name)
// sorts before the members' entries; for a name of 44 bytes its "/" reads
// as the key length of a principal's key-count pair, which ended the peek
// there, before the members.
func TestPeekBackupMembersPastABucketQuotaKey(t *testing.T) {
	n := mustNode(t, func(c *Config) { c.HTTPAdvertise = "127.0.0.1:1" })
	require.Eventually(t, n.Registered, 10*time.Second, 10*time.Millisecond)
	s := engine.Scope{Principal: strings.Repeat("p", 44), Endpoint: "e", Key: "k"}
	_, _, err := n.Claim(engine.ClaimArgs{Scope: s, Fingerprint: "aa", LeaseMs: 60_000, RetentionMs: 3_600_000})
	require.NoError(t, err)
	data := backupOf(t, n)
	info, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), RestoreOptions{NodeID: "r1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	require.NotEmpty(t, info.Members)
	require.ElementsMatch(t, info.Members, PeekBackupMembers(bytes.NewReader(data), int64(len(data))))
}

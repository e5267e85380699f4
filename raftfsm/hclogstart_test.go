package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Raft passes some values as hclog.Fmt (a snapshot's received bytes when
// its leader died midway): they are logged formatted, not as the slice of
// the format and its arguments (a walk that killed leaders mid-send read
// received="[%d / %d 157119592 293176115]").
func TestRaftFormattedValuesAreFormatted(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	h.Error("failed to receive whole snapshot", "received", hclog.Fmt("%d / %d", int64(157119592), int64(293176115)))
	require.Contains(t, buf.String(), `received="157119592 / 293176115"`)
	require.NotContains(t, buf.String(), "%d")
}

// A healthy start logs no raft warning: a node that has known no leader
// since it started times out once before its first election, and a node
// that joined empty (or behind the leader) refuses the leader's first
// append, which the leader reports too; all are info. The same warnings when something did go
// wrong (a leader was lost, a log that is not empty misses an entry) stay
// warnings.
func TestRaftWarningsOfAHealthyStartAreInfo(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	line := func(msg string, args ...any) string {
		buf.Reset()
		h.Warn(msg, args...)
		return strings.TrimSpace(buf.String())
	}
	// As hashicorp/raft v1.8 passes them.
	require.Empty(t, line("heartbeat timeout reached, starting election",
		"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")), "an election's routine is debug")
	require.Contains(t, line("failed to get previous log",
		"previous-index", uint64(21), "last-index", uint64(0), "error", raft.ErrLogNotFound), "level=INFO")

	peer := raft.Server{Suffrage: raft.Nonvoter, ID: "n4", Address: "127.0.0.4:7071"}
	require.Contains(t, line("appendEntries rejected, sending older logs", "peer", peer, "next", uint64(1)), "level=INFO")

	require.Contains(t, line("appendEntries rejected, sending older logs", "peer", peer, "next", uint64(40)), "level=WARN")
	require.Contains(t, line("heartbeat timeout reached, starting election",
		"last-leader-addr", raft.ServerAddress("127.0.0.2:7071"), "last-leader-id", raft.ServerID("n2")), "level=WARN")
	// A node behind the leader (it was down, or a join caught it up by a
	// snapshot while entries went on): the leader goes back until they
	// meet, as for an empty log.
	require.Contains(t, line("failed to get previous log",
		"previous-index", uint64(21), "last-index", uint64(17), "error", raft.ErrLogNotFound), "level=INFO")
	// An entry missing within the log is not routine.
	require.Contains(t, line("failed to get previous log",
		"previous-index", uint64(15), "last-index", uint64(17), "error", raft.ErrLogNotFound), "level=WARN")
	require.Contains(t, line("failed to contact", "server-id", raft.ServerID("n1")), "level=WARN")
}

// A clean stop logs no raft error for the connections its own transport
// ends; a command that really did not decode is still an error.
func TestRaftErrorOfItsOwnShutdownIsNotLogged(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	h.Error("failed to decode incoming command", "error", raft.ErrTransportShutdown)
	require.Empty(t, buf.String())
	h.Error("failed to decode incoming command", "error", errors.New("unknown rpc type 9"))
	require.Contains(t, buf.String(), "level=ERROR")

	// A peer that went away mid-command (the leader dropping a member it
	// removed, a peer's restart) is no error of this node's.
	for _, err := range []error{
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		io.ErrUnexpectedEOF,
	} {
		buf.Reset()
		h.Error("failed to decode incoming command", "error", err)
		require.Contains(t, buf.String(), "level=INFO", "%v", err)
	}
}

// A leader that writes no snapshot out for a follower for lack of disk
// says so itself once a minute; raft's two lines of each try (every 5 s,
// expandRetryPause) are debug. Any other failure to send one stays an error.
func TestRaftErrorsOfARefusedExpansionAreDebug(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	refused := fmt.Errorf("raftfsm: expand snapshot 1-2-3: %w: ...", errExpandDiskFull)
	h.Error("failed to open snapshot", "id", "1-2-3", "error", refused)
	h.Error("failed to send snapshot to", "peer", "n2", "error", refused)
	require.Empty(t, buf.String())
	h.Error("failed to send snapshot to", "peer", "n2", "error", errors.New("connection refused"))
	require.Contains(t, buf.String(), "level=ERROR")
}

// Two routine events raft logs as errors: a vote request whose peer closed
// the connection (every node of make cluster stopping at once), and a
// leader finding a follower's missing entries compacted away, which it
// answers with a snapshot (every join). A peer that cannot be reached, or
// a log entry lost for another reason, stays an ERROR.
func TestRoutineRaftErrorsAreInfo(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	h.Error("failed to make requestVote RPC", "target", "n2", "error", io.EOF, "term", 4)
	h.Error("failed to get log", "index", 1, "error", raft.ErrLogNotFound)
	require.Contains(t, buf.String(), "level=INFO msg=\"raft: failed to make requestVote RPC\"")
	require.Contains(t, buf.String(), "level=INFO msg=\"raft: failed to get log\"")
	require.NotContains(t, buf.String(), "level=ERROR")

	buf.Reset()
	h.Error("failed to make requestVote RPC", "target", "n2", "error", errors.New("dial tcp 127.0.0.2:7071: connect: connection refused"), "term", 4)
	h.Error("failed to get log", "index", 9, "error", errors.New("checksum mismatch"))
	require.Equal(t, 2, strings.Count(buf.String(), "level=ERROR"), buf.String())
}

// A peer being stopped (SIGTERM: a rolling restart, make cluster's Ctrl-C)
// answers the leader's heartbeats and appends "raft is already shutdown"
// until it closes its listener; the leader logged each at ERROR, "failed to
// heartbeat to ... raft is already shutdown", which reads as if its own raft
// had stopped. Found in a walk of restarts under load. A peer that then
// stays down (connection refused) is still an error.
func TestRaftErrorOfAStoppingPeerIsInfo(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	peer := raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "127.0.0.2:7071"}
	// As raft's network transport passes a peer's error back: its text.
	remote := errors.New(raft.ErrRaftShutdown.Error())
	h.Error("failed to heartbeat to", "peer", peer.Address, "backoff time", 10, "error", remote)
	h.Error("failed to appendEntries to", "peer", peer, "error", remote)
	require.NotContains(t, buf.String(), "level=ERROR", buf.String())
	require.Equal(t, 2, strings.Count(buf.String(), "level=INFO"), buf.String())

	buf.Reset()
	h.Error("failed to heartbeat to", "peer", peer.Address, "backoff time", 500, "error", errors.New("dial tcp 127.0.0.1:0->127.0.0.2:7071: connect: connection refused"))
	require.Contains(t, buf.String(), "level=ERROR")
}

// A voter stopped for a rolling restart filled the leader's log with about
// two ERROR lines a second, "failed to heartbeat to ... connection refused"
// (149 in 75 s, found in a walk of restarts under load): raft retries every
// half heartbeat timeout. The first is said, the tries within repeatEvery
// go to debug, and the next line said counts them; another peer's
// failure is said on its own.
func TestRaftErrorsRepeatingWhileAPeerIsDownAreSpaced(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).(*hclogAdapter)
	refused := errors.New("dial tcp 127.0.0.1:0->127.0.0.2:7071: connect: connection refused")
	for range 10 {
		h.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.2:7071"), "backoff time", 500, "error", refused)
	}
	require.Equal(t, 1, strings.Count(buf.String(), "level=ERROR"), buf.String())
	h.Named("replication").Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.3:7071"), "error", refused)
	require.Equal(t, 2, strings.Count(buf.String(), "level=ERROR"), "another peer's failure is its own: %s", buf.String())

	// Past repeatEvery the line is said again, with the count of those not said.
	key := "failed to heartbeat to 127.0.0.2:7071 connection refused"
	h.repeats.mu.Lock()
	p := h.repeats.last[key]
	p.at = p.at.Add(-repeatEvery)
	h.repeats.last[key] = p
	h.repeats.mu.Unlock()
	buf.Reset()
	h.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.2:7071"), "error", refused)
	require.Contains(t, buf.String(), "level=ERROR", buf.String())
	require.Contains(t, buf.String(), "repeated=9", buf.String())

	// Another kind of failure for the same peer is said on its own.
	buf.Reset()
	h.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.2:7071"), "error", errors.New("remote error: tls: bad certificate"))
	require.Contains(t, buf.String(), "level=ERROR", "another failure of the same peer: %s", buf.String())

	// A failure after a quiet spell (the peer was back) is a new run: the
	// count of the run before is not carried into it.
	h.repeats.mu.Lock()
	p = h.repeats.last[key]
	p.at, p.tried, p.skipped = p.at.Add(-2*repeatEvery), p.tried.Add(-2*repeatEvery), 5
	h.repeats.last[key] = p
	h.repeats.mu.Unlock()
	buf.Reset()
	h.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.2:7071"), "error", refused)
	require.Contains(t, buf.String(), "level=ERROR", buf.String())
	require.NotContains(t, buf.String(), "repeated=", buf.String())

	// A leadership transfer's end is routine.
	buf.Reset()
	h.Error("peer has newer term, stopping replication", "peer", raft.Server{ID: "n2", Address: "127.0.0.2:7071"})
	require.Contains(t, buf.String(), "level=INFO", buf.String())
}

// A follower refusing appends for lack of disk space is tried twice a
// second (appendpace.go): raft's lines for it, the leader's "appendEntries
// rejected" and the follower's "failed to append to logs", would fill both
// logs; the leader's is said once per repeatEvery per peer, and the
// follower's is debug (its guard says it once a minute).
func TestRaftLinesOfAFollowerRefusingAppendsForSpaceAreSpaced(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	peer := raft.Server{Suffrage: raft.Voter, ID: "n3", Address: "127.0.0.3:7071"}
	for i := range 10 {
		h.Warn("appendEntries rejected, sending older logs", "peer", peer, "next", uint64(40-i))
	}
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN"), buf.String())
	h.Warn("appendEntries rejected, sending older logs", "peer", raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "127.0.0.2:7071"}, "next", uint64(40))
	require.Equal(t, 2, strings.Count(buf.String(), "level=WARN"), "another peer's is its own: %s", buf.String())

	buf.Reset()
	h.Error("failed to append to logs", "error", errLogDiskFull)
	h.Error("failed to append to logs", "error", errLogNoRoomToApply)
	require.Empty(t, buf.String())
	h.Error("failed to append to logs", "error", errors.New("raft-wal: bad thing"))
	require.Contains(t, buf.String(), "level=ERROR", "another failure is still an error")
}

// A follower refusing the leader's snapshot for lack of disk space says so
// once a minute (logSnapshotRefused); raft said it at ERROR at every try,
// about once a second, on the follower ("failed to copy snapshot") and
// twice on the leader, which has only the error's text (a walk of
// docs/DISK.md: a node joined on a nearly full disk logged 19 in 16 s).
func TestRaftErrorsOfARefusedSnapshotInstallAreDebug(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	refused := fmt.Errorf("%w: 11665408 bytes of the leader's snapshot received", errSnapshotDiskFull)
	h.Error("failed to copy snapshot", "error", refused)
	remote := errors.New(refused.Error())
	h.Error("failed to install snapshot", "peer", "n3", "id", "3-310-1", "error", remote)
	h.Error("failed to send snapshot to", "peer", "n3", "error", remote)
	require.Empty(t, buf.String())
	h.Error("failed to copy snapshot", "error", errors.New("unexpected EOF"))
	require.Contains(t, buf.String(), "level=ERROR", "another failure is still an error")
}

// Raft's election lines (OPERATIONS.md): a voter whose leader went silent
// is news, said at WARN; the timeouts and elections of a node that knows
// no leader (a start, a node without quorum standing again every second
// or two) are an election's routine, at debug; a node that may not stand
// says once, at info, that it heard no leader. Raft said the heartbeat
// timeout of every start at INFO and each election that timed out at
// WARN, every second or two for as long as a node had no quorum.
func TestRaftElectionLinesWarnOnlyOfALostLeader(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, tc := range []struct {
		msg   string
		args  []any
		level string
	}{
		// As hashicorp/raft v1.8 passes them (raft.go, runFollower and runCandidate).
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress("127.0.0.2:7071"), "last-leader-id", raft.ServerID("n2")}, "WARN"},
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")}, "DEBUG"},
		{"Election timeout reached, restarting election", nil, "DEBUG"},
		{"heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election", nil, "INFO"},
		{"no known peers, aborting election", nil, "INFO"},
		{"not part of stable configuration, aborting election", nil, "INFO"},
		{"failed to contact quorum of nodes, stepping down", nil, "WARN"},
	} {
		buf.Reset()
		h.Warn(tc.msg, tc.args...)
		require.Contains(t, buf.String(), "level="+tc.level+" ", "%s %v", tc.msg, tc.args)
	}
}

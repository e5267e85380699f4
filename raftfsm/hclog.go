package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter sends hashicorp/raft's logs to slog. Raft is chatty at info
// level about routine events, so its info lines go to slog at debug unless
// they are warnings or errors.
type hclogAdapter struct {
	hclog.Logger // null logger: supplies the rarely used methods
	l            *slog.Logger
	name         string
	args         []any
	// quiet, when set and true, sends the routine lines of a catch-up
	// (warnLevel's info) to debug: see newHCLog.
	quiet func() bool
	// repeats spaces raft's errors that repeat while a peer is down
	// (peerDownRepeats); shared by the loggers With and Named derive.
	repeats *repeatSpacer
}

func newHCLog(l *slog.Logger) hclog.Logger {
	return &hclogAdapter{Logger: hclog.NewNullLogger(), l: l.With("component", "raft"), repeats: &repeatSpacer{last: map[string]repeat{}}}
}

// newQuietHCLog is newHCLog for a node whose raft's routine catch-up lines
// are said at debug while quiet reports true: a node that joined empty and
// has not reached its admission (Node.replayingQuiet). Its first append
// logged "failed to get previous log ... log not found" at info, a line
// every join printed and that asked nothing of anyone; once the node has
// caught up, the same lines (a node that was down, behind the leader) are
// said at info again.
func newQuietHCLog(l *slog.Logger, quiet func() bool) hclog.Logger {
	h := newHCLog(l).(*hclogAdapter)
	h.quiet = quiet
	return h
}

func (h *hclogAdapter) log(level slog.Level, msg string, args ...any) {
	if !h.l.Enabled(context.Background(), level) {
		return
	}
	all := append(append([]any(nil), h.args...), args...)
	for i, a := range all {
		// hclog.Fmt("%d / %d", n, size), as raft passes a snapshot's
		// received bytes: slog printed the slice itself,
		// received="[%d / %d 157119592 293176115]".
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				all[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	h.l.Log(context.Background(), level, "raft: "+msg, all...)
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	switch level {
	case hclog.Error:
		h.Error(msg, args...)
	case hclog.Warn:
		h.Warn(msg, args...)
	default:
		h.Debug(msg, args...)
	}
}
func (h *hclogAdapter) Trace(msg string, args ...any) {}
func (h *hclogAdapter) Debug(msg string, args ...any) { h.log(slog.LevelDebug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.log(slog.LevelDebug, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any) {
	level := warnLevel(msg, args)
	if level == slog.LevelInfo && h.quiet != nil && h.quiet() {
		level = slog.LevelDebug
	}
	if level == slog.LevelWarn {
		if why, ok := voteRefused(msg); ok {
			level, args = h.voteRefusal(why, args)
		}
	}
	if level == slog.LevelWarn && msg == rejectedMsg {
		// A follower short of disk space refuses every try, and is tried
		// every 2 s or so (appendpace.go): said once per repeatEvery per
		// peer, with the count of those not said.
		peer, _ := hcArg(args, "peer")
		said, n := h.repeats.note(msg+" "+fmt.Sprint(peer), time.Now())
		if !said {
			level = slog.LevelDebug
		} else if n > 0 {
			args = append(args, "repeated", n, "repeated-within", repeatEvery.String())
		}
	}
	h.log(level, msg, args...)
}

// rejectedMsg is raft's line for a follower's refused append.
const rejectedMsg = "appendEntries rejected, sending older logs"

// voteRefused reports why raft's line msg says this node refused a vote or
// a pre-vote ("we have a leader", "our last index is greater", ...), and
// whether it is such a line.
func voteRefused(msg string) (string, bool) {
	for _, p := range []string{"rejecting vote request since ", "rejecting pre-vote request since "} {
		if why, ok := strings.CutPrefix(msg, p); ok {
			return why, true
		}
	}
	return "", false
}

// voteRefusal is the level, and the args, of raft's line refusing a vote
// or a pre-vote for why (voteRefused). Raft says each at WARN, and a
// member cut off from its leader but not from the others (a one-way or
// partial cut, a leader that stopped sending to it) asks every second or
// two: each healthy member that still follows the leader warned, "since we
// have a leader", for as long as the cut lasted (a walk with iptables: a
// WARN every 1-2 s on the member that was fine). The trouble is the
// candidate's, and is said where it happens: the candidate's own log (no
// leader, then no leader for 1m0s at WARN), the leader's (failed to
// heartbeat to, at ERROR), and the leader's health checks (idem cluster
// status). So a refusal a candidate cannot win anyway (this node has a
// leader; the candidate's log is behind this node's; it is a non-voter) is
// said once at info per candidate and reason while the candidate keeps
// asking, and its repeats are at debug; one that comes again after
// repeatEvery without one starts a new episode. A node outside the
// configuration asking for votes (a removed member still running on a
// configuration that lists it, a node given this cluster's addresses by
// mistake) is a problem of its own someone must stop: that stays a
// warning, once per repeatEvery per candidate with the count of the rest.
func (h *hclogAdapter) voteRefusal(why string, args []any) (slog.Level, []any) {
	from, ok := hcArg(args, "from")
	if !ok {
		from, _ = hcArg(args, "candidate")
	}
	key := "vote refused since " + why + " " + fmt.Sprint(from)
	now := time.Now()
	switch why {
	case "node is not in configuration":
		said, n := h.repeats.note(key, now)
		if !said {
			return slog.LevelDebug, args
		}
		if n > 0 {
			args = append(args, "repeated", n, "repeated-within", repeatEvery.String())
		}
		return slog.LevelWarn, args
	case "we have a leader", "our last term is greater", "our last index is greater", "node is not a voter":
		if !h.repeats.begins(key, now) {
			return slog.LevelDebug, args
		}
		return slog.LevelInfo, append(args, "repeats", "at debug while it keeps asking")
	}
	return slog.LevelWarn, args
}

func (h *hclogAdapter) Error(msg string, args ...any) {
	level := errorLevel(msg, args)
	if level == slog.LevelError && peerDownRepeats[msg] {
		peer, _ := hcArg(args, "peer")
		said, n := h.repeats.note(msg+" "+fmt.Sprint(peer)+" "+errKind(args), time.Now())
		if !said {
			level = slog.LevelDebug
		} else if n > 0 {
			args = append(args, "repeated", n, "repeated-within", repeatEvery.String())
		}
	}
	h.log(level, msg, args...)
}
func (h *hclogAdapter) IsTrace() bool { return false }
func (h *hclogAdapter) IsDebug() bool {
	return h.l.Enabled(context.Background(), slog.LevelDebug)
}
func (h *hclogAdapter) IsInfo() bool  { return h.IsDebug() }
func (h *hclogAdapter) IsWarn() bool  { return true }
func (h *hclogAdapter) IsError() bool { return true }
func (h *hclogAdapter) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}
func (h *hclogAdapter) Named(name string) hclog.Logger {
	c := *h
	c.name = name
	c.l = h.l.With("raft-component", name)
	return &c
}
func (h *hclogAdapter) ResetNamed(name string) hclog.Logger { return h.Named(name) }
func (h *hclogAdapter) Name() string                        { return h.name }
func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(nil), "", 0)
}
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		h.log(slog.LevelDebug, fmt.Sprintf("%s", p))
		return len(p), nil
	})
}

// warnLevel is the slog level of a raft warning.
//
// Of raft's election lines an operator must see one: a voter whose leader
// went silent for the heartbeat timeout (crashed, killed, cut off; a
// handover does not time out), said at WARN once per loss, naming the
// leader lost. The rest is an election's routine, at debug as
// OPERATIONS.md says: the timeout of a node that knew no leader (every
// start times out once before its first election, and a node with no
// quorum stands again every second or two; it says so itself after a
// minute, Node.watchLeader), and raft's "Election timeout reached,
// restarting election" for each election that timed out unwon (a WARN
// every second or two for as long as no quorum answered). A node that may
// not stand (a non-voter, a node started to join and not added yet, a
// removed one) says once at info that it heard no leader: its own lines
// say why it may not.
//
// Also info: a node that joined with an empty log refuses the leader's
// first append (and the leader says so) before the leader sends it the
// log. So a healthy start's first lines hold no warning that asks nothing
// of anyone.
func warnLevel(msg string, args []any) slog.Level {
	switch msg {
	case "heartbeat timeout reached, starting election":
		if v, ok := hcArg(args, "last-leader-id"); ok && fmt.Sprint(v) == "" {
			return slog.LevelDebug
		}
	case "Election timeout reached, restarting election":
		return slog.LevelDebug
	case "heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election",
		"no known peers, aborting election", "not part of stable configuration, aborting election":
		return slog.LevelInfo
	case "failed to get previous log":
		// The leader's entries start past this follower's log: an empty
		// one (a join), or one behind (a node that was down, or caught up
		// by a snapshot); the leader goes back until they meet. A previous
		// index within the log that is missing stays a warning.
		last, ok1 := hcArg(args, "last-index")
		prev, ok2 := hcArg(args, "previous-index")
		l, err1 := strconv.ParseUint(fmt.Sprint(last), 10, 64)
		p, err2 := strconv.ParseUint(fmt.Sprint(prev), 10, 64)
		if ok1 && ok2 && err1 == nil && err2 == nil && (l == 0 || p > l) {
			return slog.LevelInfo
		}
	case "appendEntries rejected, sending older logs":
		// The leader's side of the same: next is 1 when the follower's
		// log is empty.
		if v, ok := hcArg(args, "next"); ok && fmt.Sprint(v) == "1" {
			return slog.LevelInfo
		}
	}
	return slog.LevelWarn
}

// errorLevel is the slog level of a raft error: debug for a connection
// that this node's own raft transport ends as it shuts down, which every
// clean stop logs for each peer connected at the time (make cluster's
// Ctrl-C printed it as an ERROR); info for one the peer ended (reset or
// closed mid-command), which a member removed with idem cluster remove
// logs when the leader drops it, and any peer's restart causes: nothing of
// this node failed, and the peer's own logs tell why it went.
func errorLevel(msg string, args []any) slog.Level {
	if msg == "peer has newer term, stopping replication" {
		// The leader learns that another node won a later term: a
		// leadership transfer (idem cluster transfer-leadership, a
		// rolling restart) ends this way, and the new leader's election
		// is logged. Nothing failed.
		return slog.LevelInfo
	}
	v, _ := hcArg(args, "error")
	err, isErr := v.(error)
	if !isErr {
		return slog.LevelError
	}
	if strings.Contains(err.Error(), supersededMarker) {
		// A recovered member's answer to this node, left out of the
		// recovery: the node said so once (superseded.go) and answers
		// every request 503; raft would say it at every heartbeat.
		return slog.LevelDebug
	}
	if peerStopping(msg, err) {
		return slog.LevelInfo
	}
	switch msg {
	case "failed to append to logs":
		// A follower short of disk space refuses the leader's entries,
		// which then tries every 2 s or so (appendpace.go): the guard says
		// so itself, once a minute (disk space low, or disk nearly full).
		if errors.Is(err, errLogDiskFull) || errors.Is(err, errLogNoRoomToApply) {
			return slog.LevelDebug
		}
	case "failed to open snapshot", "failed to send snapshot to":
		// A leader short of disk to write its state out for a follower
		// says so itself, once a minute (logExpandRefused); raft would say
		// it on every try.
		if errors.Is(err, errExpandDiskFull) || snapshotRefusedForSpace(err) {
			return slog.LevelDebug
		}
		if errors.Is(err, errStaleSnapshotSend) {
			return slog.LevelInfo
		}
	case "failed to copy snapshot", "failed to install snapshot":
		if errors.Is(err, errStaleSnapshotSend) {
			return slog.LevelInfo // a send of a term this node left: refused, as it should be
		}
		// A follower short of disk space refuses the leader's snapshot,
		// which raft sends again about every second: the follower says so
		// itself, once a minute (logSnapshotRefused), and the leader's
		// status names it. Raft said it at ERROR on both sides at every
		// try (three lines a second). The leader has only the text of
		// the follower's error.
		if snapshotRefusedForSpace(err) {
			return slog.LevelDebug
		}
	case "failed to decode incoming command":
		switch {
		case errors.Is(err, raft.ErrTransportShutdown):
			return slog.LevelDebug
		case peerEnded(err):
			return slog.LevelInfo
		}
	case "failed to make requestVote RPC":
		// The peer closed the connection in the middle of the vote: it is
		// stopping (make cluster's Ctrl-C printed this as an ERROR on a
		// clean stop of all three). A peer that cannot be reached at all
		// stays an error.
		if errors.Is(err, io.EOF) || peerEnded(err) {
			return slog.LevelInfo
		}
	case "failed to get log":
		// A leader looking for the entries a new or lagging follower
		// lacks finds them compacted away, and sends a snapshot instead:
		// raft's routine way to catch a follower up (every join logged it
		// as an ERROR).
		if errors.Is(err, raft.ErrLogNotFound) {
			return slog.LevelInfo
		}
	}
	return slog.LevelError
}

// snapshotRefusedForSpace says err is a follower's refusal of the
// leader's snapshot for lack of disk space (errSnapshotDiskFull), on the
// follower or, as its text, on the leader.
func snapshotRefusedForSpace(err error) bool {
	return errors.Is(err, errSnapshotDiskFull) || strings.Contains(err.Error(), errSnapshotDiskFull.Error())
}

// peerDownRepeats are raft's errors said on every try while a peer is
// down or out of reach: a leader's heartbeats are retried every half
// heartbeat timeout, so one voter stopped for a rolling restart filled the
// leader's log with about two ERROR lines a second (149 in 75 s).
var peerDownRepeats = map[string]bool{
	"failed to heartbeat to":     true,
	"failed to appendEntries to": true,
}

// repeatEvery is how often a repeating error (peerDownRepeats) is said
// per peer; the tries between go to debug, and the next line counts them.
const repeatEvery = 30 * time.Second

// repeatSpacer says a line per key at most once per repeatEvery.
type repeatSpacer struct {
	mu   sync.Mutex
	last map[string]repeat
}

type repeat struct {
	at      time.Time // when it was last said
	tried   time.Time // when it last happened
	skipped int       // how many times since at, not said
}

// note reports whether the line of key is said now, and if it is, how
// many were not said since the last one that was, in the same run of
// failures: one that comes after repeatEvery without it (the peer was
// back) starts a new run, and the count of the run before is dropped.
func (r *repeatSpacer) note(key string, now time.Time) (say bool, skipped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, seen := r.last[key]
	if seen && now.Sub(p.tried) >= repeatEvery {
		p.skipped = 0
	}
	if seen && now.Sub(p.at) < repeatEvery {
		p.skipped++
		p.tried = now
		r.last[key] = p
		return false, 0
	}
	if len(r.last) > 1024 {
		clear(r.last) // peers come and go: keep it bounded
	}
	r.last[key] = repeat{at: now, tried: now}
	return true, p.skipped
}

// begins reports whether a line of key starts an episode: none came in
// the repeatEvery before now (voteRefusal says an episode's first line
// at info, the rest at debug).
func (r *repeatSpacer) begins(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, seen := r.last[key]
	if seen && now.Sub(p.tried) < repeatEvery {
		p.tried = now
		r.last[key] = p
		return false
	}
	if len(r.last) > 1024 {
		clear(r.last) // peers come and go: keep it bounded
	}
	r.last[key] = repeat{at: now, tried: now}
	return true
}

// errKind is the last part of a raft error's text, which names what went
// wrong ("connection refused", "certificate signed by unknown
// authority", "EOF") without the addresses before it: another kind of
// failure for the same peer is said on its own.
func errKind(args []any) string {
	v, _ := hcArg(args, "error")
	err, ok := v.(error)
	if !ok {
		return ""
	}
	t := err.Error()
	if i := strings.LastIndex(t, ": "); i >= 0 {
		t = t[i+2:]
	}
	return t
}

// peerStopping says a peer answered this node's raft call that its raft
// is shutting down (raft's transport passes the peer's error back as its
// text): it is being stopped (SIGTERM, a rolling restart), which its own
// log tells. A leader logged it at ERROR, "failed to heartbeat to ... raft
// is already shutdown", as if its own raft had stopped. A peer that stays
// away is dialled again and refused, which stays an error.
func peerStopping(msg string, err error) bool {
	switch msg {
	case "failed to heartbeat to", "failed to appendEntries to", "failed to make requestVote RPC",
		"failed to install snapshot", "failed to send snapshot to", "failed to timeout now":
		return err.Error() == raft.ErrRaftShutdown.Error()
	}
	return false
}

// peerEnded says a read or write failed because the peer ended the
// connection; the decoder may keep only the text of a read's error.
func peerEnded(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "connection reset by peer")
}

// hcArg finds the value of key among hclog's alternating keys and values.
func hcArg(args []any, key string) (any, bool) {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return args[i+1], true
		}
	}
	return nil, false
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

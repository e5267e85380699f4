package api

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

// Headers of GET /v1/admin/snapshot, readable before the body.
const (
	snapshotIndexHeader   = "X-Idem-Snapshot-Index"
	snapshotRecordsHeader = "X-Idem-Snapshot-Records"
)

// handleSnapshot streams a backup of the whole state (raftfsm's backup
// format). The leader takes it after a linearizable read barrier, so it
// holds every write acknowledged before the request; a follower passes the
// leader's stream through. Nothing is held in memory: the state can be GBs.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	select {
	case s.snapshots <- struct{}{}:
		defer func() { <-s.snapshots }()
	default:
		// Each download holds about a MiB of buffers and, on the leader,
		// a Pebble snapshot that keeps on disk every record dropped while
		// it runs: a script looping saves (or many operators at once)
		// took them without bound.
		p := newProblem(http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf(
			"%d snapshot downloads are already running on this node, the most it serves at once: retry once one has ended", cap(s.snapshots)))
		p.retryAfter = snapshotBusyRetry
		writeProblem(w, p)
		return
	}
	deadline := time.Now().Add(s.cfg.LeaderWait)
	for {
		snap, err := s.store.Backup(r.Context())
		if err == nil {
			s.streamSnapshot(w, r, snap)
			return
		}
		// onLeader's forwarding has a whole-request timeout, which a
		// stream of GBs would run into: this route forwards on its own.
		if errors.Is(err, raftfsm.ErrNotLeader) && !s.fromPeer(r) {
			if l, ok := s.store.Leader(); ok && l.HTTPAddr != "" && l.ID != s.store.Self().ID {
				s.forwardSnapshot(w, r, l.HTTPAddr)
				return
			}
		}
		leaderless := errors.Is(err, raftfsm.ErrNotLeader) || errors.Is(err, raftfsm.ErrNoLeader)
		if p := s.notMemberIf(leaderless); p != nil {
			// Removed: no leader will ever answer through it, and "no
			// leader, retry shortly" sent the operator to retry for ever.
			writeProblem(w, p)
			return
		}
		if leaderless && time.Now().Before(deadline) && r.Context().Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if leaderless {
			err = raftfsm.ErrNoLeader
		}
		writeProblem(w, s.storeProblem(err))
		return
	}
}

func (s *Server) streamSnapshot(w http.ResponseWriter, r *http.Request, snap *engine.Snapshot) {
	defer snap.Close()
	h, err := newBackupHeader(snap, s.store.Self().ID)
	if err != nil {
		if raftfsm.DiskReadFailed(err) {
			// Its first read of the store (the records count): answered
			// as a request's read the disk failed, 503 naming no file,
			// where it was a 500 naming the table. Another member serves
			// the backup.
			s.log.Error("snapshot: this node's disk failed a read of its store as it counted the records; the download was answered 503 and nothing was changed. "+
				"Check the disk and the filesystem (dmesg, SMART), and take the backup from another member (docs/DISK.md)", "error", err)
			writeProblem(w, storeProblem(&raftfsm.StoreReadError{Err: err}))
			return
		}
		if p := storeProblem(err); p.unexpected == nil {
			writeProblem(w, p) // a stopping node's closed store
			return
		}
		s.log.Error("snapshot: describe state", "error", err)
		writeProblem(w, newProblem(http.StatusInternalServerError, codeInternal, "the snapshot could not be taken: "+err.Error()))
		return
	}
	h.Auth = raftfsm.AuthMode(s.cfg.Auth != nil)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="idem-%d.snap"`, h.AppliedIndex))
	w.Header().Set(snapshotIndexHeader, strconv.FormatUint(h.AppliedIndex, 10))
	w.Header().Set(snapshotRecordsHeader, strconv.FormatInt(h.Records, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// The head is sent before the first byte of the state is read: a
	// stream cut before net/http had sent anything (a read of the store
	// the disk failed, in its first KBs) was a connection closed without
	// an answer, which idem snapshot save took for an address that does
	// not speak HTTP ("--addr takes a node's HTTP address ..., not its
	// raft address"). Answered, the cut is a stream stopped short, which
	// save says is the node's and names its log.
	_ = http.NewResponseController(w).Flush()
	start := time.Now()
	sw := s.stallWriter(w, r)
	defer sw.stop() // deferred: a panic in the stream must not leave its watcher running
	n, err := writeBackup(sw, h, snap)
	if err != nil {
		// The status is sent: cut the connection, so the client sees a
		// broken stream (its checksum trailer is missing either way).
		if raftfsm.DiskReadFailed(err) {
			// The node's disk, not the client: said as a failed read of
			// a request is (raftfsm's StoreReadError), with what to check.
			s.log.Error("snapshot stream cut short: this node's disk failed a read of its store; the download got no whole backup (nothing was changed). "+
				"Check the disk and the filesystem (dmesg, SMART), and take the backup from another member; on a disk that keeps failing, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) (docs/DISK.md)",
				"applied-index", h.AppliedIndex, "bytes", n, "error", err)
		} else {
			s.log.Warn("snapshot stream cut short", "applied-index", h.AppliedIndex, "bytes", n, "error", err)
		}
		panic(http.ErrAbortHandler)
	}
	s.log.Info("snapshot streamed", "applied-index", h.AppliedIndex, "records", h.Records, "bytes", n,
		"seconds", time.Since(start).Seconds())
}

// writeBackup streams a backup (a variable for tests).
var writeBackup = raftfsm.WriteBackup

// newBackupHeader describes a backup's state (a variable for tests).
var newBackupHeader = raftfsm.NewBackupHeader

// snapshotClient forwards snapshot streams: bounded connecting and waiting
// for the answer's head, unbounded streaming (the request's context ends it).
var snapshotClient = &http.Client{Transport: &http.Transport{
	Proxy:                 nil,
	DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	ResponseHeaderTimeout: 30 * time.Second,
	MaxIdleConnsPerHost:   2,
}}

func (s *Server) forwardSnapshot(w http.ResponseWriter, r *http.Request, addr string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, peerURL(s.cfg.PeerTLS, addr, r.URL.RequestURI()), nil)
	if err != nil {
		writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
		return
	}
	if v := r.Header.Get("Authorization"); v != "" {
		req.Header.Set("Authorization", v)
	}
	req.Header.Set(forwardedHeader, s.forwardMark(r))
	resp, err := s.fwd.snapshots.Do(req)
	if err != nil {
		s.log.Warn("forward snapshot to leader failed", "leader", addr, "error", err)
		writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Disposition", "Retry-After", "WWW-Authenticate", snapshotIndexHeader, snapshotRecordsHeader} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	sw := s.stallWriter(w, r)
	defer sw.stop()
	_, err = io.Copy(sw, resp.Body)
	if err != nil {
		s.log.Warn("forwarded snapshot stream cut short", "leader", addr, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// DefaultMaxSnapshotDownloads is the default of
// Config.MaxSnapshotDownloads.
const DefaultMaxSnapshotDownloads = 4

// snapshotBusyRetry is the Retry-After, in seconds, of a download refused
// for the cap: a download lasts seconds to minutes, not milliseconds.
const snapshotBusyRetry = 10

// DefaultSnapshotStallTimeout is the default of Config.SnapshotStallTimeout.
const DefaultSnapshotStallTimeout = 5 * time.Minute

// stallWriter cuts a snapshot download that makes no progress for
// Config.SnapshotStallTimeout: a download takes as long as it needs, but a
// client that stops reading (a save stopped with Ctrl-Z and forgotten)
// held its handler, its connection and its Pebble snapshot, which keeps on
// disk every record dropped since, for ever. Call stop (deferred) once the stream
// ends.
//
// Progress is what the client takes. The connection's write deadline is
// renewed for each piece written, and, on Linux, whenever the client's
// kernel acknowledged more of the stream (it does so only while the
// client reads). A deadline renewed per write alone cut slow clients that
// never stopped: the stream came in writes of up to 4 MiB, each to be
// taken whole within the timeout (a client slower than about 14 KB/s over
// 5 minutes was cut), and even a 64 KiB write waits until the kernel
// frees a third of the socket's send buffer (up to 4 MiB), so a client
// slower than about 4 KB/s still was.
func (s *Server) stallWriter(w http.ResponseWriter, r *http.Request) *stallWriter {
	d := s.cfg.SnapshotStallTimeout
	if d <= 0 {
		d = DefaultSnapshotStallTimeout
	}
	sw := &stallWriter{w: w, rc: http.NewResponseController(w), timeout: d, done: make(chan struct{})}
	var acked func() (uint64, bool)
	if lc := limitedConnOf(r.Context()); lc != nil {
		acked = ackedBytes(lc.Conn)
	}
	if acked == nil {
		close(sw.done)
		return sw
	}
	sw.stopped = make(chan struct{})
	go sw.watch(acked)
	return sw
}

// stallPiece is the most a stallWriter writes under one deadline (see
// stallWriter).
const stallPiece = 64 << 10

type stallWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
	mu      sync.Mutex // SetWriteDeadline from Write and watch
	done    chan struct{}
	stopped chan struct{} // closed when watch returns; nil without one
}

func (s *stallWriter) renew(slack time.Duration) {
	s.mu.Lock()
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout + slack))
	s.mu.Unlock()
}

func (s *stallWriter) Write(p []byte) (int, error) {
	done := 0
	for len(p) > 0 {
		n := min(len(p), stallPiece)
		s.renew(0)
		m, err := s.w.Write(p[:n])
		done += m
		if err != nil {
			return done, err
		}
		p = p[n:]
	}
	return done, nil
}

// watch renews the deadline whenever the peer acknowledged more bytes,
// looking a few times per timeout; by a look's interval more than the
// timeout, so that progress just after a look (seen only at the next) does
// not leave the client less than the timeout.
func (s *stallWriter) watch(acked func() (uint64, bool)) {
	defer close(s.stopped)
	every := min(max(s.timeout/8, 10*time.Millisecond), 10*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	last, _ := acked()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if n, ok := acked(); ok && n > last {
				last = n
				s.renew(every)
			}
		}
	}
}

// stop ends the watch; once it returns the deadline is renewed no more.
func (s *stallWriter) stop() {
	if s.stopped == nil {
		return
	}
	close(s.done)
	<-s.stopped
}

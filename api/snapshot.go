package api

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
		writeProblem(w, storeProblem(err))
		return
	}
}

func (s *Server) streamSnapshot(w http.ResponseWriter, r *http.Request, snap *engine.Snapshot) {
	defer snap.Close()
	h, err := raftfsm.NewBackupHeader(snap, s.store.Self().ID)
	if err != nil {
		s.log.Error("snapshot: describe state", "error", err)
		writeProblem(w, newProblem(http.StatusInternalServerError, codeInternal, "the snapshot could not be taken: "+err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="idem-%d.snap"`, h.AppliedIndex))
	w.Header().Set(snapshotIndexHeader, strconv.FormatUint(h.AppliedIndex, 10))
	w.Header().Set(snapshotRecordsHeader, strconv.FormatInt(h.Records, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	start := time.Now()
	n, err := raftfsm.WriteBackup(s.stallWriter(w), h, snap)
	if err != nil {
		// The status is sent: cut the connection, so the client sees a
		// broken stream (its checksum trailer is missing either way).
		s.log.Warn("snapshot stream cut short", "applied-index", h.AppliedIndex, "bytes", n, "error", err)
		panic(http.ErrAbortHandler)
	}
	s.log.Info("snapshot streamed", "applied-index", h.AppliedIndex, "records", h.Records, "bytes", n,
		"seconds", time.Since(start).Seconds())
}

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
	if _, err := io.Copy(s.stallWriter(w), resp.Body); err != nil {
		s.log.Warn("forwarded snapshot stream cut short", "leader", addr, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// DefaultSnapshotStallTimeout is the default of Config.SnapshotStallTimeout.
const DefaultSnapshotStallTimeout = 5 * time.Minute

// stallWriter gives each write of a snapshot download
// Config.SnapshotStallTimeout: a download takes as long as it needs, but a
// client that stops reading (a save stopped with Ctrl-Z and forgotten)
// held its handler, its connection and its Pebble snapshot, which keeps on
// disk every record dropped since, for ever.
func (s *Server) stallWriter(w http.ResponseWriter) io.Writer {
	d := s.cfg.SnapshotStallTimeout
	if d <= 0 {
		d = DefaultSnapshotStallTimeout
	}
	return &stallWriter{w: w, rc: http.NewResponseController(w), timeout: d}
}

type stallWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return s.w.Write(p)
}

package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idem-store/idem/raftfsm"
	"github.com/idem-store/idem/ttl"
)

// retention is what a claim gets, as /v1/config publishes it: the
// cluster's retention once the first claim pinned it, before that this
// node's --retention (which that claim pins). The claim itself carries the
// node's flag, which the leader's raftfsm replaces with the pinned one.
func (s *Server) retention() time.Duration {
	if d, ok := s.store.Retention(); ok {
		return d
	}
	return s.cfg.Retention
}

// featureRetention, on /healthz, says this node's Apply knows the
// cluster's retention (raftfsm.OpSetRetention): a member of an older
// version would skip that entry and go on deciding claims with the
// retention each claim carries, out of step with the others.
const featureRetention = raftfsm.FeatureRetention

type retentionRequest struct {
	Retention           string `json:"retention"`
	AllowShortRetention bool   `json:"allow_short_retention"`
}

type retentionAnswer struct {
	Outcome           string `json:"outcome"`
	Retention         string `json:"retention"`
	RetentionSeconds  int64  `json:"retention_seconds"`
	PreviousRetention string `json:"previous_retention"`
	// FirstPin: no claim (nor an earlier change) had pinned the
	// cluster's retention; PreviousRetention is then the leader's
	// --retention, which the next claim would have pinned.
	FirstPin bool `json:"first_pin,omitempty"`
}

// handleSetRetention changes the cluster's retention of records claimed
// from now on (PUT /v1/admin/retention). Stored records keep the expiry
// they were given: clients were told their expires_at.
func (s *Server) handleSetRetention(w http.ResponseWriter, r *http.Request) {
	var req retentionRequest
	body, p := s.readJSON(w, r, &req)
	var d time.Duration
	if p == nil {
		d, p = s.checkRetention(req)
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	lacking := func() *problem {
		l := s.membersLacking(r.Context(), featureRetention)
		if l == "" {
			return nil
		}
		p := newProblem(http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf(
			"changing the retention needs every member to run a version that holds the cluster's retention; %s not yet, or not answering (a rolling upgrade?): retry once they do", l))
		p.retryAfter = 10
		return p
	}
	// Asked here first, too: a leader of an older version knows no such
	// route, and would answer the forwarded request 404.
	if !s.fromPeer(r) && !s.store.IsLeader() {
		if p := lacking(); p != nil {
			writeProblem(w, p)
			return
		}
	}
	var prev time.Duration
	var firstPin bool
	var refused *problem
	if !s.fromPeer(r) && !s.store.IsLeader() {
		// The leader answers the forwarded change once it has applied it;
		// this node answers once it has too, so its own GET /v1/config,
		// asked next, shows the new retention.
		w = &onSuccess{ResponseWriter: w, before: func() { s.catchUpWithLeader(r.Context()) }}
	}
	if s.onLeader(w, r, body, func() error {
		if !s.store.IsLeader() {
			return s.store.SetRetention(d) // refused: forwarded to the leader
		}
		if refused = lacking(); refused != nil {
			return nil
		}
		prev = s.retention()
		_, pinned := s.store.Retention()
		firstPin = !pinned
		return s.store.SetRetention(d)
	}) != nil {
		return
	}
	if refused != nil {
		writeProblem(w, refused)
		return
	}
	switch {
	case firstPin:
		s.log.Info("retention of new records pinned on request (no claim had pinned one)", "retention", d, "leader-retention", prev)
	case prev == d:
		s.log.Info("retention of new records set on request, as it was", "retention", d)
	default:
		s.log.Info("retention of new records changed on request", "retention", d, "previous", prev)
	}
	writeJSON(w, http.StatusOK, retentionAnswer{Outcome: "set", Retention: d.String(),
		RetentionSeconds: durationSeconds(d), PreviousRetention: prev.String(), FirstPin: firstPin})
}

func (s *Server) checkRetention(req retentionRequest) (time.Duration, *problem) {
	if req.Retention == "" {
		return 0, invalid("retention is required: a duration such as \"48h\"")
	}
	d, err := time.ParseDuration(req.Retention)
	if err != nil {
		return 0, invalid("retention %q is not a duration such as \"48h\" or \"90m\"", truncate(req.Retention, 40))
	}
	if err := ttl.ValidateRetention(d, req.AllowShortRetention); err != nil {
		msg := strings.TrimPrefix(err.Error(), "ttl: ")
		msg = strings.ReplaceAll(msg, "pass --allow-short-retention", "send \"allow_short_retention\": true")
		return 0, invalid("retention: %s", msg)
	}
	if d < time.Millisecond {
		return 0, invalid("retention %s is under a millisecond", d)
	}
	if d%time.Millisecond != 0 {
		// The state holds milliseconds: 1.5ms was answered "set 1.5ms"
		// and stored as 1ms.
		return 0, invalid("retention %s is not a whole number of milliseconds", d)
	}
	// Counted in the cluster's buckets: this node's --bucket-width may
	// differ from the width the cluster's first command fixed.
	width := s.cfg.BucketWidth
	if w, ok := s.store.BucketWidth(); ok {
		width = w
	}
	if err := ttl.ValidateSpan(d, width); err != nil {
		return 0, invalid("retention: %s", strings.TrimPrefix(err.Error(), "ttl: "))
	}
	return d, nil
}

// onSuccess runs before once, ahead of a 2xx status line.
type onSuccess struct {
	http.ResponseWriter
	before func()
	done   bool
}

func (o *onSuccess) WriteHeader(code int) {
	if code >= 200 && code < 300 && !o.done {
		o.done = true
		o.before()
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *onSuccess) Write(b []byte) (int, error) {
	if !o.done {
		o.WriteHeader(http.StatusOK)
	}
	return o.ResponseWriter.Write(b)
}

// catchUpWithLeader waits, at most a few seconds, until this node has
// applied what the leader has committed; best effort: the change is made
// either way, and only what this node shows lags.
func (s *Server) catchUpWithLeader(ctx context.Context) {
	l, ok := s.store.Leader()
	if !ok || l.HTTPAddr == "" {
		return
	}
	commit, err := s.fwd.leaderCommit(ctx, l.HTTPAddr)
	if err != nil {
		return
	}
	for deadline := time.Now().Add(3 * time.Second); !s.store.CaughtUp(commit) && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(20 * time.Millisecond) // CaughtUp waits a while itself; this only keeps it from spinning
	}
}

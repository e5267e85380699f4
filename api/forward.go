package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/idem-store/idem/raftfsm"
)

// forwardedHeader marks a request a follower passed to the leader, so a
// node that lost leadership meanwhile answers instead of forwarding again.
const forwardedHeader = "X-Idem-Forwarded-By"

type forwarder struct {
	s      *Server
	client *http.Client
}

func newForwarder(s *Server) *forwarder {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return &forwarder{s: s, client: &http.Client{Transport: tr, Timeout: 15 * time.Second}}
}

// onLeader runs do, which must be decided by the leader. A follower
// forwards the original request to the leader and passes its answer
// through unchanged; during an election it waits up to LeaderWait for a
// leader and then answers 503. A non-nil return means the answer is
// written.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte, do func() error) error {
	deadline := time.Now().Add(s.cfg.LeaderWait)
	for {
		err := do()
		if err == nil {
			return nil
		}
		leaderless := errors.Is(err, raftfsm.ErrNotLeader) || errors.Is(err, raftfsm.ErrNoLeader)
		if errors.Is(err, raftfsm.ErrNotLeader) && r.Header.Get(forwardedHeader) == "" {
			if l, ok := s.store.Leader(); ok && l.HTTPAddr != "" && l.ID != s.store.Self().ID {
				s.fwd.forward(w, r, body, l.HTTPAddr)
				return errAnswered
			}
		}
		if leaderless && time.Now().Before(deadline) {
			select {
			case <-r.Context().Done():
				writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
				return errAnswered
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if leaderless {
			err = raftfsm.ErrNoLeader
		}
		writeProblem(w, storeProblem(err))
		return errAnswered
	}
}

func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, body []byte, addr string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeProblem(w, storeProblem(raftfsm.ErrNoLeader))
		return
	}
	for _, h := range []string{"Authorization", "Content-Type", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(forwardedHeader, f.s.store.Self().ID)
	resp, err := f.client.Do(req)
	if err != nil {
		// The leader may or may not have decided: same answer as a lost leadership.
		f.s.log.Warn("forward to leader failed", "leader", addr, "error", err)
		writeProblem(w, storeProblem(raftfsm.ErrUnknownOutcome))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "Allow", "WWW-Authenticate"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// leaderCommit asks the leader for its commit index.
func (f *forwarder) leaderCommit(ctx context.Context, addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/cluster", nil)
	if err != nil {
		return 0, err
	}
	if len(f.s.cfg.AuthTokens) > 0 {
		req.Header.Set("Authorization", "Bearer "+f.s.cfg.AuthTokens[0])
	}
	req.Header.Set(forwardedHeader, f.s.store.Self().ID)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("leader answered %s", resp.Status)
	}
	var st struct {
		CommitIndex uint64 `json:"commit_index"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return 0, err
	}
	return st.CommitIndex, nil
}

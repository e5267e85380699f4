package api

import (
	"net/http"

	"github.com/idem-store/idem/raftfsm"
)

func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	st, err := s.store.Status()
	if err != nil {
		writeProblem(w, storeProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	body, p := s.readJSON(w, r, &req)
	if p == nil && (req.ID == "" || req.RaftAddr == "" || req.HTTPAddr == "") {
		p = invalid("id, raft_addr and http_addr are required")
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	info := raftfsm.NodeInfo{ID: req.ID, RaftAddr: req.RaftAddr, HTTPAddr: req.HTTPAddr}
	if s.onLeader(w, r, body, func() error { return s.store.Join(info) }) != nil {
		return
	}
	writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "joined"})
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req removeRequest
	body, p := s.readJSON(w, r, &req)
	if p == nil && req.ID == "" {
		p = invalid("id is required")
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	if s.onLeader(w, r, body, func() error { return s.store.Remove(req.ID) }) != nil {
		return
	}
	writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "removed"})
}

func (s *Server) handleTransfer(w http.ResponseWriter, r *http.Request) {
	if s.onLeader(w, r, nil, s.store.TransferLeadership) != nil {
		return
	}
	writeJSON(w, http.StatusOK, outcomeJSON{Outcome: "transferred"})
}

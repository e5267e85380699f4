package api

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// removedStore is a node an operator removed: only what the answer reads.
type removedStore struct {
	Store
	removedWhileReplaying bool
}

func (removedStore) Self() raftfsm.NodeInfo {
	return raftfsm.NodeInfo{ID: "n3", RaftAddr: "10.0.0.3:7071", HTTPAddr: "10.0.0.3:7070"}
}
func (removedStore) Outside() bool           { return true }
func (removedStore) PeerHTTPAddrs() []string { return []string{"10.0.0.1:7070"} }
func (r removedStore) RemovedWhileReplaying() (string, bool) {
	return "10.0.0.1:7070", r.removedWhileReplaying
}

// A removed node answers callers with the idem cluster join command that
// adds it back. On a TLS cluster with tokens that command failed as
// pasted (a TLS error, then 401 and 403): it now names the client flags a
// join needs there, as placeholders (the answer goes to any caller).
func TestRemovedNodesAddBackCommandNamesTheTLSAndTokenFlags(t *testing.T) {
	const base = "idem cluster join --id n3 --raft-addr 10.0.0.3:7071 --node-http-addr 10.0.0.3:7070 --addr 10.0.0.1:7070"
	for _, replaying := range []bool{false, true} {
		s := &Server{store: removedStore{removedWhileReplaying: replaying}}
		require.Contains(t, s.notMemberIf(true).Detail, base, "plain: nothing added")
		require.NotContains(t, s.notMemberIf(true).Detail, "--ca-file")
		s.cfg.PeerTLS = &raftfsm.TLS{}
		s.cfg.Auth = NewAuth(LegacyCredentials([]string{"t"}))
		require.Contains(t, s.notMemberIf(true).Detail,
			base+" --ca-file CA_FILE --cert-file CERT_FILE --key-file KEY_FILE --token-file ADMIN_TOKEN_FILE", "replaying %v", replaying)
	}
}

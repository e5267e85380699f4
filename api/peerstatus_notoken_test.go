package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A leader started with --auth-file but no --node-token-file asks a joining
// node with no token at all; the node's 401 must not read as a wrong token
// in its --auth-file ("every node's --auth-file needs the entry ...", and a
// join refused as "it runs with another --auth-file, as a node of another
// cluster does"): at 3 am the operator checks the joining node, which is
// right, and may wipe it. The fix is this node's --node-token-file.
func TestPeerStatusWithoutANodeTokenSaysThisNodeHasNone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	_, err := peerStatus(context.Background(), srv.Client(), srv.URL+"/v1/cluster", "n2:8080", "", "n1")
	require.Error(t, err)
	require.True(t, errors.Is(err, raftfsm.ErrNoNodeToken), "%v", err)
	require.True(t, errors.Is(err, raftfsm.ErrTokenRefused), "%v", err)
	require.Contains(t, err.Error(), "no --node-token-file")
	require.Contains(t, err.Error(), TokenRefused)
}

package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A leader that refuses to store a value it cannot encrypt for the cluster
// (no key file, or another key under the id) answers 503 with a detail
// naming the key, not the generic "leadership is changing" of an unproposed
// command nor a 500: another leader may hold the key, so the client retries.
func TestSealRefusedIs503NamingTheKey(t *testing.T) {
	for _, err := range []error{
		&raftfsm.SealRefusedError{InUse: []string{"k1"}},
		fmt.Errorf("batch op 2: %w", &raftfsm.SealRefusedError{KeyID: "k1", Mismatch: true}),
	} {
		p := storeProblem(err)
		require.Equal(t, http.StatusServiceUnavailable, p.Status)
		require.Equal(t, codeUnavailable, p.Code)
		require.Contains(t, p.Detail, `k1`)
		require.Contains(t, p.Detail, "nothing was stored")
		require.Positive(t, p.retryAfter)
	}
}

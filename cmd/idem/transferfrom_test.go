package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// OPERATIONS.md's rolling restart hands the leadership over with
// `transfer-leadership --from LEADER-ID`; in an upgrade the leader is the
// last node on the earlier release, and a release before --from refuses
// the field (400 invalid_request, unknown field "from": a rollback walk,
// upgrading from a 2026-12-01 build). The command now asks who leads and
// hands over without the field only when --from leads.
func TestTransferFromAnEarlierReleaseLeader(t *testing.T) {
	var leader atomic.Value
	leader.Store("n3")
	var transfers atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/cluster":
			json.NewEncoder(w).Encode(map[string]any{"leader": map[string]string{"id": leader.Load().(string)}, "nodes": []any{}})
		case r.Method == http.MethodPost && r.URL.Path == "/v1/cluster/transfer-leadership":
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(`"from"`)) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"type":"https://idem.dev/problems/invalid_request","title":"Invalid request","status":400,"detail":"unknown field \"from\"","code":"invalid_request"}`))
				return
			}
			transfers.Add(1)
			from := leader.Load().(string)
			leader.Store("n1")
			json.NewEncoder(w).Encode(map[string]string{"outcome": "transferred", "from": from, "leader": "n1"})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"cluster", "transfer-leadership", "--addr", addr, "--from", "n3"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "leadership moved from n3 to n1")
	require.Contains(t, stderr.String(), "without --from")
	require.Equal(t, int32(1), transfers.Load())

	// Run twice: n1 leads now, nothing is handed over.
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"cluster", "transfer-leadership", "--addr", addr, "--from", "n3"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "n1 leads, not n3: nothing was handed over")
	require.Equal(t, int32(1), transfers.Load())
}

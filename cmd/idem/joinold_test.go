package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A member of an earlier release refuses a join body with a field it
// does not know (its decoder disallows them): a node now sending its
// --retention must still join a cluster of such members, as one sending
// "empty" did, by asking again without the field.
func TestJoinAsksAnEarlierReleaseWithoutItsUnknownFields(t *testing.T) {
	t.Parallel()
	for _, known := range [][]string{
		{"id", "raft_addr", "http_addr", "scope", "force"},          // knows neither empty nor retention
		{"id", "raft_addr", "http_addr", "scope", "force", "empty"}, // knows empty, not retention
	} {
		var bodies []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			b, _ := json.Marshal(req)
			bodies = append(bodies, string(b))
			for f := range req {
				if !strings.Contains(strings.Join(known, ","), f) {
					w.WriteHeader(http.StatusBadRequest)
					json.NewEncoder(w).Encode(map[string]string{"code": "invalid_request", "detail": `json: unknown field "` + f + `"`})
					return
				}
			}
			w.Write([]byte(`{"outcome":"joined","suffrage":"nonvoter"}`))
		}))
		m := &member{c: &serveConfig{}, client: &http.Client{}}
		body := map[string]any{"id": "n4", "raft_addr": "a:1", "http_addr": "a:2", "scope": "endpoint", "retention": "24h0m0s", "empty": true}
		_, _, status, err := m.join(context.Background(), strings.TrimPrefix(srv.URL, "http://"), body)
		srv.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "%s", bodies)
		last := bodies[len(bodies)-1]
		require.NotContains(t, last, "retention")
		require.Equal(t, strings.Contains(strings.Join(known, ","), "empty"), strings.Contains(last, "empty"), "%s", bodies)
	}
}

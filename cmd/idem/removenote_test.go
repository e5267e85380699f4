package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// After removing a non-voter from a cluster whose only voter is n1,
// `idem cluster remove` printed "NOTE: n1 is the only voter left" (a README
// walk): n1 was the only voter before, and removing a non-voter changed
// nothing about the voters. The note now speaks only when the removal took
// a voter away; when the command cannot tell (the status before could not
// be read) it says what the voters are without "left".
func TestRemoveNoteSpeaksOnlyOfAChangeOfVoters(t *testing.T) {
	type node struct{ id, suffrage string }
	status := func(nodes ...node) map[string]any {
		var ns []any
		for _, n := range nodes {
			ns = append(ns, map[string]any{"id": n.id, "suffrage": n.suffrage, "healthy": true})
		}
		return map[string]any{"self": map[string]string{"id": "n1"}, "leader": map[string]string{"id": "n1"}, "nodes": ns}
	}
	for _, tc := range []struct {
		name          string
		before, after map[string]any
		beforeFails   bool
		want, wantNot string
	}{
		{name: "a non-voter", before: status(node{"n1", "voter"}, node{"n2", "nonvoter"}), after: status(node{"n1", "voter"}),
			wantNot: "voter"},
		{name: "a voter leaving one", before: status(node{"n1", "voter"}, node{"n2", "voter"}), after: status(node{"n1", "voter"}),
			want: "NOTE: n1 is the only voter left: the cluster survives no failure"},
		{name: "a voter leaving two", before: status(node{"n1", "voter"}, node{"n2", "voter"}, node{"n3", "voter"}, node{"n4", "nonvoter"}),
			after: status(node{"n1", "voter"}, node{"n3", "voter"}, node{"n4", "nonvoter"}),
			want:  "NOTE: two voters are left (n1, n3)"},
		{name: "not known", beforeFails: true, after: status(node{"n1", "voter"}),
			want: "NOTE: n1 is the only voter: the cluster survives no failure", wantNot: "left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var removed atomic.Bool
			srv := startNotIdem(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Method == http.MethodGet && r.URL.Path == "/v1/cluster":
					st := tc.before
					if removed.Load() {
						st = tc.after
					} else if tc.beforeFails {
						http.Error(w, "no", http.StatusInternalServerError)
						return
					}
					json.NewEncoder(w).Encode(st)
				case r.Method == http.MethodPost && r.URL.Path == "/v1/cluster/remove":
					removed.Store(true)
					w.Write([]byte(`{"outcome":"removed"}`))
				default:
					http.NotFound(w, r)
				}
			})
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"cluster", "remove", "--addr", srv.addr, "--id", "n2"}, &stdout, &stderr)
			require.Equal(t, 0, code, "stdout %s stderr %s", stdout.String(), stderr.String())
			out := stdout.String()
			require.Contains(t, out, "removed n2 from the cluster")
			if tc.want != "" {
				require.Contains(t, out, tc.want)
			}
			if tc.wantNot != "" {
				require.NotContains(t, strings.TrimPrefix(out, "removed n2 from the cluster\n"), tc.wantNot, "%s", out)
			}
		})
	}
}

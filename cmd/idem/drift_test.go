package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A setting one node does not publish (an older version in a rolling
// upgrade: max_batch_ops came later) is not a drift; a setting that
// differs among the nodes publishing it still is.
func TestSettingsDriftLeavesOutASettingANodeDoesNotPublish(t *testing.T) {
	config := func(limits string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"retention":"24h0m0s","retention_seconds":86400,"lease_default_ms":30000,"scope":"endpoint","bucket_width":"2h0m0s","limits":{` + limits + `}}`))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	older := config(`"max_scope_bytes":255,"max_keys_per_principal":100000`)
	newer := config(`"max_scope_bytes":255,"max_keys_per_principal":5,"max_batch_ops":256`)
	newest := config(`"max_scope_bytes":255,"max_keys_per_principal":100000,"max_batch_ops":256`)
	member := func(id string, srv *httptest.Server) raftfsm.Member {
		var m raftfsm.Member
		m.ID, m.HTTPAddr = id, strings.TrimPrefix(srv.URL, "http://")
		return m
	}
	st := raftfsm.Status{Nodes: []raftfsm.Member{member("n1", older), member("n2", newer), member("n3", newest)}}
	out := settingsDrift(context.Background(), st, nil)
	require.Equal(t, []string{"max_keys_per_principal: n1 100000, n2 5, n3 100000"}, out)
}

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
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
	out := settingsDrift(st, memberConfigs(context.Background(), st, nil))
	require.Equal(t, []string{"max_keys_per_principal: n1 100000, n2 5, n3 100000"}, out)
}

// configByHost answers GET /v1/config with the body given for the host
// asked, in memory.
type configByHost map[string]string

func (c configByHost) RoundTrip(r *http.Request) (*http.Response, error) {
	b := c[r.URL.Host]
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(b)), ContentLength: int64(len(b)), Request: r}, nil
}

// A member started with another --auth-file (a token only its file lists,
// or one its file gives other principals: it then serves them their
// records with consistency=stale) was not among the settings idem cluster
// status compared. It is now, by a digest each node publishes; a member
// of an earlier release publishes none and is left out. Limits print as
// their flags take them (max_lease_ms printed 3.6e+06).
func TestSettingsDriftNamesAnotherAuthFile(t *testing.T) {
	config := func(digest string) string {
		d := ""
		if digest != "" {
			d = `,"auth_file_digest":"` + digest + `"`
		}
		return `{"retention":"24h0m0s","retention_seconds":86400,"lease_default_ms":30000,"scope":"endpoint","bucket_width":"2h0m0s","limits":{"max_lease_ms":3600000,"max_keys_per_principal":100000}` + d + `}`
	}
	rt := configByHost{"n1:1": config("aaaa"), "n2:1": config("aaaa"), "n3:1": config("bbbb"), "n4:1": config("")}
	st := fourMembers()
	out := settingsDrift(st, memberConfigs(context.Background(), st, []client.Option{client.WithHTTPClient(&http.Client{Transport: rt})}))
	require.Equal(t, []string{"auth file digest: n1 aaaa, n2 aaaa, n3 bbbb"}, out)

	rt["n3:1"] = strings.Replace(config("aaaa"), "3600000", "7200000", 1)
	out = settingsDrift(st, memberConfigs(context.Background(), st, []client.Option{client.WithHTTPClient(&http.Client{Transport: rt})}))
	require.Equal(t, []string{"max_lease_ms: n1 1h0m0s, n2 1h0m0s, n3 2h0m0s, n4 1h0m0s"}, out)
}

// --commit-timeout, which a follower's forward waits by (beyond its 3 s,
// what the flag adds to its 5 s default), was no setting idem cluster
// status compared: a follower left at the default cut each write it
// forwarded to a leader raised to 30 s at 3 s, 503 with its outcome
// unknown, and nothing but that follower's log said why. Each node now
// publishes it; a member of an earlier release publishes none and is left
// out.
func TestSettingsDriftNamesAnotherCommitTimeout(t *testing.T) {
	config := func(commit string) string {
		c := ""
		if commit != "" {
			c = `,"commit_timeout_ms":` + commit
		}
		return `{"retention":"24h0m0s","retention_seconds":86400,"lease_default_ms":30000,"scope":"endpoint","bucket_width":"2h0m0s","limits":{"max_keys_per_principal":100000}` + c + `}`
	}
	rt := configByHost{"n1:1": config("30000"), "n2:1": config("5000"), "n3:1": config("30000"), "n4:1": config("")}
	st := fourMembers()
	out := settingsDrift(st, memberConfigs(context.Background(), st, []client.Option{client.WithHTTPClient(&http.Client{Transport: rt})}))
	require.Equal(t, []string{"commit timeout: n1 30s, n2 5s, n3 30s"}, out)

	rt["n2:1"] = config("30000")
	out = settingsDrift(st, memberConfigs(context.Background(), st, []client.Option{client.WithHTTPClient(&http.Client{Transport: rt})}))
	require.Empty(t, out)
}

// fourMembers is the status of members n1..n4, each at "<id>:1".
func fourMembers() raftfsm.Status {
	var st raftfsm.Status
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		var m raftfsm.Member
		m.ID, m.HTTPAddr = id, id+":1"
		st.Nodes = append(st.Nodes, m)
	}
	return st
}

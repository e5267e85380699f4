package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/raftfsm"
)

// asked answers GET /v1/config per host as a node does: hosts[host][0]
// to the token, hosts[host][1] to a request without one ("401" for a
// refusal, "" if it must not be asked so).
type asked map[string][2]string

func (a asked) RoundTrip(r *http.Request) (*http.Response, error) {
	b := a[r.URL.Host][0]
	if r.Header.Get("Authorization") == "" {
		if b = a[r.URL.Host][1]; b == "" {
			panic(r.URL.Host + " asked without a token")
		}
	}
	status := http.StatusOK
	if b == "401" {
		b, status = `{"type":"https://idem.dev/problems/unauthorized","title":"Unauthorized","status":401,"detail":"missing token","code":"unauthorized"}`, http.StatusUnauthorized
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if status != http.StatusOK {
		h.Set("Content-Type", "application/problem+json")
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(b)), ContentLength: int64(len(b)), Request: r}, nil
}

// A walk rolled n3 back to a release from before node.json recorded
// --auth-file, from a unit file without the flag: it started, served every
// principal's records to requests without a token, and idem cluster status
// said nothing (such a release publishes no auth file digest, which the
// settings comparison leaves out). A member that publishes none is asked
// /v1/config without the token too, and named if it answers.
func TestClusterStatusNamesAMemberOfAnEarlierReleaseThatChecksNoToken(t *testing.T) {
	const cfg = `{"retention":"24h0m0s","lease_default_ms":30000,"limits":{}}`
	member := func(id string) raftfsm.Member {
		var m raftfsm.Member
		m.ID, m.HTTPAddr = id, id+":7070"
		return m
	}
	st := raftfsm.Status{Nodes: []raftfsm.Member{member("n1"), member("n2"), member("n3")}}
	probe := func(hosts asked) []string {
		opts := []client.Option{client.WithToken("idem_admin"), client.WithHTTPClient(&http.Client{Transport: hosts})}
		return openMembers(context.Background(), st, memberConfigs(context.Background(), st, opts), opts)
	}
	digest := func(d string) string { return strings.Replace(cfg, "{", `{"auth_file_digest":"`+d+`",`, 1) }
	// n1 and n2 publish their digest and are not asked without the token.
	require.Equal(t, []string{"n3"}, probe(asked{"n1:7070": {digest("abc")}, "n2:7070": {digest("abc")}, "n3:7070": {cfg, cfg}}))
	// All of the earlier release: asked without it, n1 refuses.
	require.Equal(t, []string{"n3"}, probe(asked{"n1:7070": {cfg, "401"}, "n2:7070": {cfg, "401"}, "n3:7070": {cfg, cfg}}))
	require.Empty(t, probe(asked{"n1:7070": {cfg, cfg}, "n2:7070": {cfg, cfg}, "n3:7070": {cfg, cfg}}), "no member checks tokens: nothing to tell apart")
	require.Empty(t, probe(asked{"n1:7070": {digest("abc")}, "n2:7070": {digest("abc")}, "n3:7070": {digest("none")}}),
		"a release that says none is named by the settings comparison")
}

package main

import (
	"net/http"
	"testing"
)

// idem cluster join's --node-http-addr takes a member's HTTP address in the
// forms --join takes: host:port or http://host:port. http://[::1]:7072 was
// refused here ("must be host:port") while --join took it; it is sent as
// the host:port a member's address is recorded as.
func TestClusterJoinTakesTheNodeHTTPAddrFormsOfJoin(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	t.Setenv("IDEM_ADDR", "")
	for given, sent := range map[string]string{
		"http://[::1]:27072":      "[::1]:27072",
		"http://127.0.0.11:27072": "127.0.0.11:27072",
		" [::1]:27072":            "[::1]:27072",
		"node-4.example:27072":    "node-4.example:27072",
	} {
		f := newAPIFake(t, http.StatusOK, `{"outcome":"joined","suffrage":"nonvoter"}`)
		code, _, stderr := runClientCmd(t, runCluster, "join", "--addr", f.url, "--id", "n4", "--raft-addr", "[::1]:27071", "--node-http-addr", given)
		if code != 0 {
			t.Errorf("--node-http-addr %q: exit %d, %s", given, code, stderr)
			continue
		}
		if f.path != "/v1/cluster/join" || f.body["http_addr"] != sent {
			t.Errorf("--node-http-addr %q: sent %s %v, want http_addr %q", given, f.path, f.body, sent)
		}
	}
	// What --join refuses, this refuses too.
	for _, bad := range []string{"https://[::1]:27072", "http://[::1]", "[::1]", "::1:27072", "http://[::1]:27072/"} {
		f := newAPIFake(t, http.StatusOK, `{}`)
		if code, _, stderr := runClientCmd(t, runCluster, "join", "--addr", f.url, "--id", "n4", "--raft-addr", "[::1]:27071", "--node-http-addr", bad); code != 2 {
			t.Errorf("--node-http-addr %q: exit %d (%s), want 2", bad, code, stderr)
		}
		if checkHostPort(memberHTTPAddr(bad)) == nil {
			t.Errorf("--join %q would be taken", bad)
		}
	}
}

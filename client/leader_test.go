package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The leader an answer names is followed only to one of the client's own
// nodes: a header naming any other host (a hostile follower's, or one a man
// in the middle wrote) sends nothing there, neither the token nor a body.
// And it is followed however the leader spells its address: a client given
// 127.0.0.1:p follows a leader advertising [::ffff:127.0.0.1]:p, as it
// follows [::1]:p named [0:0::1]:p (before, only the exact spelling was
// followed, and every write paid for a follower's forward).
func TestFollowsTheLeaderSpelledOtherwiseAndNoOtherHost(t *testing.T) {
	hits := make([]int, 2)
	var leader string
	srvs := fakeNodes(t, 2, func(i int, w http.ResponseWriter, r *http.Request) {
		hits[i]++
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("node %d: no token", i)
		}
		w.Header().Set(LeaderHeader, leader)
		io.WriteString(w, `{}`)
	})
	c, err := New(srvs[0].URL+","+srvs[1].URL, WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, evil := range []string{"evil.example:80", "http://evil.example:80", "127.0.0.1:1", ""} {
		leader = evil
		if _, err := c.Do(ctx, http.MethodPost, "/v1/x", nil, map[string]string{"card": "4242"}); err != nil {
			t.Fatalf("leader %q: %v", evil, err)
		}
		if c.Addr() != srvs[0].URL {
			t.Fatalf("after an answer naming %q the client sends to %s, want it left on %s", evil, c.Addr(), srvs[0].URL)
		}
	}
	u, _ := url.Parse(srvs[1].URL)
	leader = "[::ffff:" + u.Hostname() + "]:0" + u.Port()
	if _, err := c.Do(ctx, http.MethodPost, "/v1/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if c.Addr() != srvs[1].URL {
		t.Fatalf("leader named %q: the client sends next to %s, want %s", leader, c.Addr(), srvs[1].URL)
	}
	if _, err := c.Do(ctx, http.MethodPost, "/v1/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if hits[1] != 1 || strings.Contains(c.Addr(), "evil") {
		t.Fatalf("hits %v, want the leader's one", hits)
	}
}

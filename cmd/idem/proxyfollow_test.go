package main

import "testing"

// The proxy follows the leader an answer names only to one of --store's
// nodes, and however the leader spells its address: before, only its exact
// spelling was followed ([::1]:p given, [0:0::1]:p advertised kept every
// write on a follower's forward).
func TestProxyFollowsTheLeaderSpelledOtherwiseAndNoOtherHost(t *testing.T) {
	nodes, err := parseStores("127.0.0.11:27001,[::1]:27002,Node-3.example:27003", false)
	if err != nil {
		t.Fatal(err)
	}
	f := newStoreFailover(nodes, nil)
	for _, evil := range []string{"evil.example:80", "127.0.0.11:27002", "[::2]:27002"} {
		f.follow(evil)
		if f.cur.Load() != 0 {
			t.Fatalf("followed %q to node %d", evil, f.cur.Load())
		}
	}
	for leader, want := range map[string]int64{"[0:0:0:0:0:0:0:1]:27002": 1, "node-3.EXAMPLE:27003": 2, "[::ffff:127.0.0.11]:27001": 0} {
		f.follow(leader)
		if got := f.cur.Load(); got != want {
			t.Errorf("leader %q: node %d next, want %d", leader, got, want)
		}
	}
}

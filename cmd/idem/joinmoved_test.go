package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/raftfsm"
	"github.com/stretchr/testify/require"
)

// slowRaftProxy forwards connections at its address to to, passing what
// the dialer sends at about bps bytes a second: a node advertising it as
// its raft address replays a leader's log slowly, as one does a large log.
func slowRaftProxy(t *testing.T, to string, bps int) string {
	t.Helper()
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				d, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer d.Close()
				go func() { io.Copy(c, d); c.Close() }()
				buf := make([]byte, max(bps/20, 1))
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := d.Write(buf[:n]); err != nil {
							return
						}
						time.Sleep(time.Duration(n) * time.Second / time.Duration(bps))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A node that joined and replays a long log, killed with -9 and started
// again at another raft address, has state (part of the log), is not a
// member of the configuration it knows yet, and is not outside it (it
// replays toward its admission): idem serve's membership loop asked no one,
// and the leader kept sending to the old address. The node waited for
// ever, saying nothing (before, it warned that it had been removed, with
// a command to add it back, and waited all the same). A member restarted
// at a new raft address asks to be recorded there; this one does too, once
// the cluster's configuration shows it at other addresses.
func TestJoinerKilledWhileReplayingRejoinsAtANewRaftAddress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n1 := start(t, dir+"/n1", freePort(t), freePort(t))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				a := call("POST", n1.http, "/v1/claim", claimReq(fmt.Sprintf("before-%d-%d", w, i), "c"))
				if a.code != 201 {
					t.Errorf("claim before the join: %s", a)
					return
				}
			}
		}()
	}
	wg.Wait()

	http2, raft2 := freePort(t), freePort(t)
	slow := slowRaftProxy(t, raft2, 40_000)
	n2 := launch(t, dir+"/n2", http2, raft2, "--node-id", "n2", "--join", n1.http, "--raft-advertise", slow)
	replaying := func() (bool, string) {
		a := call("GET", http2, "/v1/cluster", "")
		var st raftfsm.Status
		if a.code != 200 || json.Unmarshal(a.body, &st) != nil {
			return false, a.String()
		}
		listed := slices.ContainsFunc(st.Nodes, func(m raftfsm.Member) bool { return m.ID == "n2" })
		// The nodes are those of the configuration n2 knows: none until it
		// has state.
		return len(st.Nodes) > 0 && !listed, a.String()
	}
	waitFor(t, 20*time.Second, "n2 replaying the log short of its admission", replaying)
	require.NoError(t, n2.cmd.Process.Kill())
	n2.wait()

	raft2b := freePort(t)
	n2 = launch(t, dir+"/n2", http2, raft2b, "--node-id", "n2", "--join", n1.http)
	waitForLine(t, n2.logs, serving)
	if ok, _ := replaying(); !ok {
		t.Skip("n2 restarted past its admission: the window this test is about is gone")
	}
	waitFor(t, 30*time.Second, "n2 recorded at its new raft address, and ready", func() (bool, string) {
		a := call("GET", n1.http, "/v1/cluster", "")
		var st raftfsm.Status
		json.Unmarshal(a.body, &st)
		i := slices.IndexFunc(st.Nodes, func(m raftfsm.Member) bool { return m.ID == "n2" })
		if i < 0 || st.Nodes[i].RaftAddr != raft2b {
			return false, a.String()
		}
		r := call("GET", http2, "/readyz", "")
		return r.code == 200, r.String()
	})
}

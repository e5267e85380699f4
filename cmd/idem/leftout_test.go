package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leftOut is two nodes on one address after `idem recover` made n1 the
// cluster without n2: n1 serves again, n2 is stopped with the data dir it
// had as a voter. The tests of a member a recovery left out start here.
type leftOut struct {
	n1, n2         *cnode
	d2, h1, h2, r2 string
	args2          []string
}

// recoverWithoutN2 starts n1, joins n2 as a voter, calls before (if any)
// while both serve, stops both and recovers n1 alone.
func recoverWithoutN2(t *testing.T, before func(h1 string)) *leftOut {
	t.Helper()
	ip := testIP("127.0.0.9")
	root := t.TempDir()
	h1, r1, h2, r2 := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	d1, d2 := filepath.Join(root, "n1"), filepath.Join(root, "n2")
	args1 := []string{"--node-id", "n1", "--min-free-disk", "0"}
	l := &leftOut{d2: d2, h1: h1, h2: h2, r2: r2, args2: []string{"--node-id", "n2", "--join", h1, "--min-free-disk", "0"}}
	l.n1 = &cnode{id: "n1", p: start(t, d1, h1, r1, args1...)}
	l.n2 = &cnode{id: "n2", p: start(t, d2, h2, r2, l.args2...)}
	l.waitVoter(t, "n2")
	if before != nil {
		before(h1)
	}
	l.n2.kill(t)
	l.n1.kill(t)
	out, err := idemCmd(t, "recover", "--data-dir", d1, "--node-id", "n1", "--peers", "n1="+r1, "--yes")
	require.NoError(t, err, "%s", out)
	l.n1.p = start(t, d1, h1, r1, args1...)
	return l
}

// waitVoter waits until n1 lists id as a healthy voter.
func (l *leftOut) waitVoter(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 30*time.Second, id+" a voter", func() (bool, string) {
		v, st := memberAt(t, l.h1, id)
		return v.Suffrage == "voter" && v.Healthy, st.Leader.ID
	})
}

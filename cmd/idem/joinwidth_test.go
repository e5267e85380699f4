package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node that joins, with an empty data dir, a cluster whose bucket width
// differs from its --bucket-width logged the flag's width at its start and
// nothing after, while it used the cluster's (its state, metric and
// /v1/config had it), until it restarted. Once it has the cluster's state
// it now warns, once, naming both widths and the one in force; a node
// joining with the cluster's width says nothing of it.
func TestJoinWithAnotherBucketWidthWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	leader := freePort(t)
	start(t, filepath.Join(dir, "a"), leader, freePort(t), "--node-id", "a", "--bucket-width", "1h")
	claimOK(t, leader, "fixes-the-width")

	const warning = "this node's --bucket-width 2h0m0s differs from 1h0m0s, the cluster's bucket width (fixed by its first write): this node uses 1h0m0s"
	other := freePort(t)
	b := launch(t, filepath.Join(dir, "b"), other, freePort(t), "--node-id", "b", "--join", leader)
	same := freePort(t)
	c := launch(t, filepath.Join(dir, "c"), same, freePort(t), "--node-id", "c", "--join", leader, "--bucket-width", "1h")
	for _, addr := range []string{other, same} {
		waitFor(t, 30*time.Second, addr+" has the cluster's width", func() (bool, string) {
			a := call("GET", addr, "/v1/config", "")
			return a.err == nil && a.code == 200 && strings.Contains(string(a.body), `"bucket_width":"1h0m0s"`), a.String()
		})
	}
	waitFor(t, 30*time.Second, "b warns of the widths", func() (bool, string) {
		return strings.Contains(b.logs.String(), warning), b.logs.String()
	})
	require.Regexp(t, `level=WARN msg=".*`+regexp.QuoteMeta(warning)+`.*" bucket-width=1h0m0s flag-bucket-width=2h0m0s`, b.logs.String())
	// The start line said where its width came from, until the cluster's
	// is known: b's is the default's (it said "flag", of a flag not
	// given), c's the flag's.
	require.Regexp(t, `msg="idem serving".* bucket-width=2h0m0s bucket-width-from=default`, b.logs.String())
	require.Regexp(t, `msg="idem serving".* bucket-width=1h0m0s bucket-width-from=flag`, c.logs.String())
	// Once: claims after it (each a state change) repeat nothing.
	claimOK(t, leader, "after-the-join")
	claimOK(t, other, "through-b")
	require.Equal(t, 1, strings.Count(b.logs.String(), "the cluster's bucket width"), b.logs.String())
	require.NotContains(t, c.logs.String(), "the cluster's bucket width", "c joined with the cluster's width")
}

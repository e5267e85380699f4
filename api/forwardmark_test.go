package api_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A client's X-Idem-Forwarded-By may fill the header limit with ids: the
// node read its configuration once per id (an allocation and a copy each)
// after splitting the mark into a list, so one such request cost ~0.2 s of
// CPU and 8 MB of memory per node it passed (1 MiB of "a,a,a...": attack
// on loopback). It is judged with one read of the configuration and no
// copy of the mark, and still as before: a node's id anywhere in it
// makes it a node's.
func TestLongForwardMarkIsJudgedInOnePass(t *testing.T) {
	n := mustNode(t)
	self := n.node.Self().ID
	client := strings.Repeat("a,", 200_000) + "a"
	r := httptest.NewRequest("POST", "/v1/claim", nil)
	r.Header.Set("X-Idem-Forwarded-By", client)
	require.False(t, n.api.FromPeer(r), "a mark naming no member is a client's")
	allocs := testing.AllocsPerRun(3, func() { n.api.FromPeer(r) })
	require.Less(t, allocs, 100.0, "allocations to judge a mark of 200,001 ids")

	r.Header.Set("X-Idem-Forwarded-By", client+", "+self)
	require.True(t, n.api.FromPeer(r), "a mark that ends with this node's id")
	r.Header.Set("X-Idem-Forwarded-By", self+","+client)
	require.True(t, n.api.FromPeer(r), "a mark that starts with this node's id")
}

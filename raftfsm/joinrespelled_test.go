package raftfsm

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A voter's raft address written another way (a --raft-advertise name of
// the IP recorded, or the reverse) is the same socket: a non-voter's join
// took it, a voter's was misjudged. Restarted advertising the name while
// another voter was down, a voter was refused would_lose_quorum every
// second ("not yet measured at its new address", healthy as it was); and
// cluster join giving the IP of a voter that advertises the name was
// refused not_answering ("its raft address is localhost:…, not
// 127.0.0.1:…"). Both go through, and the voter is recorded as asked.
func TestVoterAtItsRaftAddressWrittenAnotherWayIsLetThrough(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t)
	addrs := testRaftAddrs(t, 3) // IDEM_TEST_IP and IDEM_TEST_PORTS on a shared machine
	n1 := c.open("n1", addrs[0], true)
	c.leader(n1)
	// localhost names 127.0.0.1 alone; the port is one of this test's.
	_, port, err := net.SplitHostPort(addrs[1])
	require.NoError(t, err)
	ip, name := "127.0.0.1:"+port, "localhost:"+port
	n2 := c.open("n2", ip, false)
	c.join(n2, n1)
	n3 := c.open("n3", addrs[2], false)
	c.join(n3, n1)
	c.stop(n3) // n1 and n2 are the quorum: moving n2 counted unhealthy leaves none

	cfg := n2.cfg
	cfg.RaftAddr, cfg.RaftAdvertise = ip, name
	c.stop(n2)
	n2 = c.start(cfg)
	l := c.leader(n1)
	require.Equal(t, ip, member(t, l, "n2").RaftAddr)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err = l.Join(n2.Self(), false, false); err == nil || time.Now().After(end) {
			break
		}
	}
	require.NoError(t, err, "n2 restarted at its name")
	require.Equal(t, name, member(t, l, "n2").RaftAddr)

	// By hand, at the IP, while n2 advertises the name.
	byIP := n2.Self()
	byIP.RaftAddr = ip
	_, err = l.Join(byIP, false, false)
	require.NoError(t, err)
	require.Equal(t, ip, member(t, l, "n2").RaftAddr)
	require.Eventually(t, func() bool { return member(t, l, "n2").Healthy }, 10*time.Second, 20*time.Millisecond)

	// Another port is another socket: still refused.
	typo := n2.Self()
	typo.RaftAddr = absentAddr(t)
	_, err = l.Join(typo, false, false)
	require.ErrorIs(t, err, ErrIDInUse)
	require.Equal(t, ip, member(t, l, "n2").RaftAddr)
}

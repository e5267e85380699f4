package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyStoreAtARaftPortSaysSo: `idem proxy --store 127.0.0.1:7071`, a
// node's raft port, logged only `error=EOF`: raft reads the health check
// as an unknown message and closes. The proxy now says the address did not
// answer HTTP and which address --store takes, as the CLI says of --addr.
func TestProxyStoreAtARaftPortSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", freePort(t))
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// What a raft listener does with bytes that are not raft: it
			// reads them (buffered) and closes without an answer.
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			c.Close()
		}
	}()
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", ln.Addr().String())
	waitFor(t, 10*time.Second, "the proxy says the --store node did not answer HTTP", func() (bool, string) {
		return strings.Contains(px.logs.String(), "did not answer HTTP"), px.logs.String()
	})
	require.Contains(t, px.logs.String(), "not their raft addresses")
}

package main

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// An upstream that answers a keyed POST, which asked for no protocol,
// with 101 Switching Protocols has run it (a framework's upgrade
// handler on a payment's route): the reverse proxy refuses the switch,
// and the caller's 502 said the upstream "did not answer", which sends an
// operator looking for a dead upstream while each retry runs the request
// again. It says what the upstream did.
func TestProxyUnaskedSwitchIsNamed(t *testing.T) {
	var runs atomic.Int64
	up := rawUpstream(t, func(c net.Conn, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		runs.Add(1)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n")
	})
	store := startStore(t)
	px := startProxy(t, "--upstream", up, "--store", store.http)
	a := pxSend(t, "POST", px.url+"/pay", "switch-1", `{"amount":1}`)
	require.Equal(t, http.StatusBadGateway, a.status, a.body)
	require.NotContains(t, a.body, "did not answer")
	require.Contains(t, a.body, "101 Switching Protocols")
	require.EqualValues(t, 1, runs.Load())
}

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An answer whose complete the store did not take in time (no leader
// for longer than --store-timeout, here a store restarted) reaches its caller, and the complete
// is asked again in the background. On SIGTERM the proxy exited once its
// handlers had returned, and that complete with it: the key stayed
// claimed, and the caller's retry, after the lease, ran the payment a
// second time though the first had been answered. The proxy now waits,
// within --shutdown-timeout, for the completes still on their way.
func TestProxySIGTERMWaitsForCompletesStillOnTheirWay(t *testing.T) {
	dir, httpAddr, raftAddr := filepath.Join(t.TempDir(), "data"), freePort(t), freePort(t)
	store := start(t, dir, httpAddr, raftAddr)
	var runs atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			// The store goes away between the claim and the complete.
			store.cmd.Process.Kill()
			store.wait()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	}))
	ln, err := net.Listen("tcp", freePort(t)) // the test's own address (IDEM_TEST_IP)
	require.NoError(t, err)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	args := []string{"--upstream", up.URL, "--store", httpAddr, "--store-timeout", "1s", "--lease", "10s", "--shutdown-timeout", "20s"}
	px := startProxy(t, args...)

	a := pxSend(t, "POST", px.url+"/pay", "pending-1", `{"amount":1}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	require.Equal(t, `{"run":1}`, a.body)
	waitFor(t, 5*time.Second, "the proxy asks the store again in the background", func() (bool, string) {
		return strings.Contains(px.logs.String(), "retrying in the background"), ""
	})

	require.NoError(t, px.cmd.Process.Signal(syscall.SIGTERM))
	time.Sleep(time.Second)
	start(t, dir, httpAddr, raftAddr) // back, with what it had stored
	select {
	case <-px.done:
	case <-time.After(15 * time.Second):
		t.Fatal("proxy did not exit after SIGTERM")
	}

	px2 := startProxy(t, args...)
	again := pxSend(t, "POST", px2.url+"/pay", "pending-1", `{"amount":1}`)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"), "%d %s\nlogs of the first proxy:\n%s", again.status, again.body, px.logs.String())
	require.Equal(t, `{"run":1}`, again.body)
	require.EqualValues(t, 1, runs.Load())
}

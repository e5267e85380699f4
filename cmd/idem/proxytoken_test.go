package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A proxy started without a store token in front of a store that runs
// with --auth-file says so at start, naming the flags, instead of leaving
// the operator to find out from the first keyed request's 503 and a log
// line that asks to "check the store token" it was never given.
func TestProxyWithoutStoreTokenNamesTheFlag(t *testing.T) {
	t.Setenv("IDEM_STORE_TOKEN", "")
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("ops", "admin-1", "admin"))
	httpAddr := freePort(t)
	start(t, filepath.Join(dir, "data"), httpAddr, freePort(t), "--auth-file", auth)
	up := newUpstream(t)

	px := startProxy(t, "--upstream", up.srv.URL, "--store", httpAddr)
	waitFor(t, 10*time.Second, "the proxy's warning about its missing store token", func() (bool, string) {
		logs := px.logs.String()
		return strings.Contains(logs, "the store runs with --auth-file and the proxy has no store token") &&
			strings.Contains(logs, "--store-token or --store-token-file"), logs
	})
}

// A --store-token-file open to other users is named at start, as the
// node's --auth-file and --node-token-file are (a CLI walk: nothing said
// so, and its token acts for every principal the proxy serves).
func TestProxyWarnsOfAnOpenStoreTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "store.token")
	if err := os.WriteFile(tok, []byte("app-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", freePort(t), "--store-token-file", tok)
	waitFor(t, 10*time.Second, "the proxy's warning about its open token file", func() (bool, string) {
		logs := px.logs.String()
		return strings.Contains(logs, "--store-token-file is readable by other users"), logs
	})
}

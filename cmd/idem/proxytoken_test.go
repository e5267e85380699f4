package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	// Chmod, not WriteFile's mode alone: an in-process serve earlier in
	// the package set the process's umask to 077 (restrictUmask).
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	px := startProxy(t, "--upstream", up.srv.URL, "--store", freePort(t), "--store-token-file", tok)
	waitFor(t, 10*time.Second, "the proxy's warning about its open token file", func() (bool, string) {
		logs := px.logs.String()
		return strings.Contains(logs, "--store-token-file is readable by other users"), logs
	})
}

// IDEM_STORE_TOKEN is read when neither --store-token nor
// --store-token-file is given, but is never --store-token's default:
// `idem proxy --help` printed defaults, and with it the store token (an
// app token for every principal the proxy serves) into terminals and CI
// logs, as TestAuthTokenFromEnvIsNeverPrinted guards for the client
// commands' IDEM_AUTH_TOKEN (a leak walk).
func TestProxyStoreTokenFromEnvIsNeverPrinted(t *testing.T) {
	const secret = "idem_s3cr3t-store-token-from-env"
	t.Setenv("IDEM_STORE_TOKEN", secret)
	code, stdout, stderr := runClientCmd(t, runProxy, "--help")
	if code != 0 {
		t.Fatalf("idem proxy --help exited %d: %s", code, stderr)
	}
	if !strings.Contains(stdout+stderr, "--store-token") {
		t.Fatalf("idem proxy --help lists no --store-token:\n%s%s", stdout, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Errorf("idem proxy --help printed the token of IDEM_STORE_TOKEN:\n%s%s", stdout, stderr)
	}
}

// The store token of IDEM_STORE_TOKEN still reaches the store, and a
// --store-token-file given beside it is the token used (a flag before the
// environment, as the client commands' --token-file before
// IDEM_AUTH_TOKEN), not refused as if --store-token had been given too.
func TestProxyStoreTokenFromEnvReachesTheStore(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	writeAuth(t, auth, entry("nodes", "admin-1", "admin"), entry("px", "px-token", "app", "*"))
	httpAddr := freePort(t)
	start(t, filepath.Join(dir, "data"), httpAddr, freePort(t), "--auth-file", auth)
	up := newUpstream(t)

	t.Setenv("IDEM_STORE_TOKEN", "px-token")
	px := startProxy(t, "--upstream", up.srv.URL, "--store", httpAddr)
	a := pxSend(t, "POST", px.url+"/pay", "env-1", `{"amount":1}`, "Authorization", "Bearer caller")
	if a.status != 201 {
		t.Fatalf("keyed request through a proxy with IDEM_STORE_TOKEN: %d %s\n%s", a.status, a.body, px.logs)
	}

	tok := filepath.Join(dir, "px.token")
	require.NoError(t, os.WriteFile(tok, []byte("px-token\n"), 0o600))
	t.Setenv("IDEM_STORE_TOKEN", "not-a-token-of-the-store")
	px2 := startProxy(t, "--upstream", up.srv.URL, "--store", httpAddr, "--store-token-file", tok)
	a = pxSend(t, "POST", px2.url+"/pay", "file-1", `{"amount":1}`, "Authorization", "Bearer caller")
	if a.status != 201 {
		t.Fatalf("keyed request through a proxy with --store-token-file and IDEM_STORE_TOKEN: %d %s\n%s", a.status, a.body, px2.logs)
	}
}

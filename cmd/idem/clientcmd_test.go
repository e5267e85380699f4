package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/internal/idemtest"
)

// apiFake answers every request with status and body and records the last
// request's path, query, Authorization header and JSON body.
type apiFake struct {
	url    string
	path   string
	query  string
	auth   string
	body   map[string]any
	status int
	answer string
}

func newAPIFake(t *testing.T, status int, answer string) *apiFake {
	t.Helper()
	f := &apiFake{status: status, answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.path, f.query, f.auth = r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization")
		f.body = nil
		if raw, _ := io.ReadAll(r.Body); len(raw) > 0 {
			if err := json.Unmarshal(raw, &f.body); err != nil {
				t.Errorf("request body: %v", err)
			}
		}
		if f.status >= 400 {
			w.Header().Set("Content-Type", "application/problem+json")
		}
		if f.status == http.StatusConflict {
			w.Header().Set("Retry-After", "4")
		}
		w.WriteHeader(f.status)
		io.WriteString(w, f.answer)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func runClientCmd(t *testing.T, run func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestClaimCommand(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	answer := `{"outcome":"claimed","token":"7","attempt":1,"created_at":"2025-01-02T03:04:05.678Z","expires_at":"2025-01-03T03:04:05.678Z","lease_expires_at":"2025-01-02T03:04:35.678Z"}`
	f := newAPIFake(t, http.StatusCreated, answer)
	code, stdout, stderr := runClientCmd(t, runClaim, "--addr", f.url, "--principal", "cus_42", "--endpoint", "POST /payments",
		"--key", "retry-1", "--fingerprint", "9f86", "--lease", "45s", "--claim-id", "a1", "--correlation-id", "req-77")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := map[string]any{"principal": "cus_42", "endpoint": "POST /payments", "key": "retry-1",
		"fingerprint": "9f86", "lease_ms": 45000.0, "claim_id": "a1", "correlation_id": "req-77"}
	if f.path != "/v1/claim" || !reflect.DeepEqual(f.body, want) {
		t.Errorf("sent %s %v, want /v1/claim %v", f.path, f.body, want)
	}
	var printed, sent map[string]any
	if err := json.Unmarshal([]byte(stdout), &printed); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	json.Unmarshal([]byte(answer), &sent)
	if !reflect.DeepEqual(printed, sent) {
		t.Errorf("stdout %s, want the server's answer %s", stdout, answer)
	}
	if stderr != "" {
		t.Errorf("stderr %q on success", stderr)
	}
}

func TestClaimCommandInProgress(t *testing.T) {
	f := newAPIFake(t, http.StatusConflict, `{"type":"t","title":"Another attempt is in progress","status":409,`+
		`"detail":"another attempt holds the lease","code":"in_progress","lease_expires_at":"2025-01-02T03:04:35.678Z"}`)
	code, stdout, stderr := runClientCmd(t, runClaim, "--addr", f.url, "--principal", "p", "--endpoint", "e", "--key", "k", "--fingerprint", "ab")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if stdout != "" {
		t.Errorf("stdout %q on a problem", stdout)
	}
	for _, want := range []string{"idem claim: another attempt holds the lease", "code in_progress", "HTTP 409",
		"lease expires at 2025-01-02T03:04:35.678Z", "retry after 4s"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
}

func TestCommandsReportMissingFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) int
		args []string
		want []string
	}{
		{"claim without principal", runClaim, []string{"--endpoint", "e", "--key", "k", "--fingerprint", "ab"},
			[]string{"idem claim: --principal is required"}},
		{"claim without anything", runClaim, nil, []string{"idem claim: --principal is required",
			"idem claim: --endpoint is required", "idem claim: --key is required", "idem claim: --fingerprint is required"}},
		{"complete without token and status", runComplete, []string{"--principal", "p", "--endpoint", "e", "--key", "k"},
			[]string{"idem complete: --token is required", "idem complete: --status is required"}},
		{"complete with a bad header", runComplete, []string{"--header", "nocolon"}, []string{"idem complete:", "-header", "Name: value"}},
		{"extend without lease", runExtend, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--token", "1"},
			[]string{"idem extend: --lease is required"}},
		{"extend with lease 0", runExtend, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--token", "1", "--lease", "0"},
			[]string{"idem extend: --lease must be positive"}}, // it said "is required" (a CLI walk)
		{"release without token", runRelease, []string{"--principal", "p", "--endpoint", "e", "--key", "k"},
			[]string{"idem release: --token is required"}},
		{"get with a bad consistency", runGet, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--consistency", "eventual"},
			[]string{"idem get: --consistency must be linearizable or stale"}},
		{"claim with a bad lease", runClaim, []string{"--lease", "soon"}, []string{"idem claim:", "-lease"}},
		{"delete with a stray argument", runDelete, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "extra"},
			[]string{`idem delete: unexpected argument "extra"`}},
		{"cluster remove with the id as an argument", runCluster, []string{"remove", "n4"},
			[]string{`idem cluster remove: unexpected argument "n4" (did you mean --id n4?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runClientCmd(t, tc.run, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q on a usage error", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
}

func TestCommandHelpListsEveryFlag(t *testing.T) {
	for name, cmd := range clientCommands {
		t.Run(name, func(t *testing.T) {
			code, stdout, _ := runClientCmd(t, cmd.Run, "--help")
			if code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			if cmd.Summary == "" {
				t.Error("no summary")
			}
			want := []string{"Usage: idem " + name, "--addr", "--auth-token", "--token-file", "--principal", "--endpoint", "--key", "--timeout"}
			want = append(want, map[string][]string{
				"claim":    {"--fingerprint", "--lease", "--claim-id", "--correlation-id"},
				"complete": {"--token", "--status", "--content-type", "--header", "--body", "--body-file"},
				"release":  {"--token", "--reason"},
				"extend":   {"--token", "--lease"},
				"get":      {"--consistency"},
			}[name]...)
			for _, w := range want {
				if !strings.Contains(stdout, w) {
					t.Errorf("help lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestCompleteCommandSendsResponse(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	f := newAPIFake(t, http.StatusOK, `{"outcome":"completed","record":{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","state":"completed"}}`)
	dir := t.TempDir()
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, []byte(`{"id":"py_1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("# operators\n\ns3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runClientCmd(t, runComplete, "--addr", f.url, "--token-file", tokenFile,
		"--principal", "cus_42", "--endpoint", "POST /payments", "--key", "retry-1", "--token", "7",
		"--status", "201", "--content-type", "application/json", "--header", "Location: /payments/py_1",
		"--header", "X-Request-Id:  r1", "--header", "Set-Cookie: a=1", "--header", "set-cookie: b=2", "--body-file", bodyFile)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := map[string]any{"principal": "cus_42", "endpoint": "POST /payments", "key": "retry-1", "token": "7",
		"response": map[string]any{"status": 201.0, "content_type": "application/json",
			"headers": map[string]any{"Location": "/payments/py_1", "X-Request-Id": "r1", "Set-Cookie": []any{"a=1", "b=2"}}, "body": "eyJpZCI6InB5XzEifQ=="}}
	if f.path != "/v1/complete" || !reflect.DeepEqual(f.body, want) {
		t.Errorf("sent %s %v\nwant /v1/complete %v", f.path, f.body, want)
	}
	if f.auth != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the token of --token-file (comments and blank lines skipped)", f.auth)
	}
	if !strings.Contains(stdout, `"outcome": "completed"`) {
		t.Errorf("stdout %q", stdout)
	}
}

func TestCompleteCommandBodyFromStdin(t *testing.T) {
	f := newAPIFake(t, http.StatusOK, `{"outcome":"completed","record":{"principal":"p","endpoint":"e","key":"k"}}`)
	old := cliStdin
	cliStdin = strings.NewReader("hello")
	defer func() { cliStdin = old }()
	code, _, stderr := runClientCmd(t, runComplete, "--addr", f.url, "--principal", "p", "--endpoint", "e", "--key", "k",
		"--token", "7", "--status", "200", "--body-file", "-")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := f.body["response"].(map[string]any)["body"]; got != "aGVsbG8=" {
		t.Errorf("body %v, want base64 of stdin", got)
	}
}

func TestGetCommand(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "from-env")
	t.Run("found", func(t *testing.T) {
		answer := `{"record":{"principal":"p","endpoint":"POST /x","key":"k","state":"in_progress"}}`
		f := newAPIFake(t, http.StatusOK, answer)
		t.Setenv("IDEM_ADDR", f.url)
		code, stdout, stderr := runClientCmd(t, runGet, "--principal", "p", "--endpoint", "POST /x", "--key", "k", "--consistency", "stale")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		if f.path != "/v1/records" || f.query != "consistency=stale&endpoint=POST+%2Fx&key=k&principal=p" {
			t.Errorf("sent %s?%s", f.path, f.query)
		}
		if f.auth != "Bearer from-env" {
			t.Errorf("Authorization %q, want the token of IDEM_AUTH_TOKEN", f.auth)
		}
		var printed map[string]any
		if err := json.Unmarshal([]byte(stdout), &printed); err != nil || printed["record"] == nil {
			t.Errorf("stdout %q is not the server's answer", stdout)
		}
	})
	t.Run("not found", func(t *testing.T) {
		f := newAPIFake(t, http.StatusNotFound, `{"type":"t","title":"Not found","status":404,"detail":"no live record for the scope","code":"not_found"}`)
		code, stdout, stderr := runClientCmd(t, runGet, "--addr", f.url, "--principal", "p", "--endpoint", "e", "--key", "k")
		if code != 1 || stdout != "" {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if want := "idem get: no live record for the scope (code not_found, HTTP 404)\n"; stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	})
}

func TestCommandUnreachableServer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	code, _, stderr := runClientCmd(t, runDelete, "--addr", addr, "--principal", "p", "--endpoint", "e", "--key", "k", "--timeout", "2s")
	if code != 1 || !strings.HasPrefix(stderr, "idem delete: ") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestBadAddrIsAUsageError: IDEM_ADDR=nonsense (no port) made every client
// command look the name up and fail with a network error, exit 1. An
// address that is neither host:port nor a URL is a usage error, exit 2,
// naming $IDEM_ADDR when it came from there, before any call.
func TestBadAddrIsAUsageError(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	cmds := []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) int
		args []string
	}{
		{"idem get", runGet, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--timeout", "2s"}},
		{"idem claim", runClaim, []string{"--principal", "p", "--endpoint", "e", "--key", "k", "--fingerprint", "ff", "--timeout", "2s"}},
		{"idem cluster", runCluster, []string{"status", "--timeout", "2s"}},
		{"idem keys status", runKeys, []string{"status", "--timeout", "2s"}},
		{"idem snapshot save", runSnapshot, []string{"save", filepath.Join(t.TempDir(), "snap")}},
	}
	for _, bad := range []string{"nonsense", "nonsense:http", "127.0.0.1:99999", "127.0.0.1"} {
		for _, c := range cmds {
			t.Setenv("IDEM_ADDR", bad)
			code, stdout, stderr := runClientCmd(t, c.run, c.args...)
			want := c.name + `: $IDEM_ADDR (--addr) "` + bad + `" is not host:port or a URL`
			if code != 2 || stdout != "" || !strings.HasPrefix(stderr, want) {
				t.Errorf("IDEM_ADDR=%s %s: exit %d, stderr %q, want exit 2 and %q", bad, c.name, code, stderr, want)
			}
			t.Setenv("IDEM_ADDR", "")
			code, _, stderr = runClientCmd(t, c.run, append(append([]string{}, c.args...), "--addr", bad)...)
			want = c.name + `: --addr "` + bad + `" is not host:port or a URL`
			if code != 2 || !strings.HasPrefix(stderr, want) {
				t.Errorf("--addr %s %s: exit %d, stderr %q, want exit 2 and %q", bad, c.name, code, stderr, want)
			}
		}
	}
	// What client.New takes stays accepted: host:port, URLs with or
	// without a port, several nodes.
	f := newAPIFake(t, http.StatusOK, `{"record":{}}`)
	port := f.url[strings.LastIndex(f.url, ":"):]
	for _, good := range []string{f.url, strings.TrimPrefix(f.url, "http://"), f.url + "/", "127.0.0.1:1," + f.url, port, "[::1]:1," + f.url} {
		code, _, stderr := runClientCmd(t, runGet, "--addr", good, "--principal", "p", "--endpoint", "e", "--key", "k")
		if code != 0 {
			t.Errorf("--addr %s: exit %d, stderr %q", good, code, stderr)
		}
	}
}

// TestAddrWithV1Path: --addr http://h:p/v1/ sent GET /v1/v1/records and
// printed "no route GET /v1/v1/records". client.New takes a URL's path as
// a prefix of every route (a node behind a proxy at /idem), so the path
// stays, but a trailing /v1, the API's own prefix, is dropped.
func TestAddrWithV1Path(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	t.Setenv("IDEM_ADDR", "")
	f := newAPIFake(t, http.StatusOK, `{"record":{}}`)
	for _, tc := range []struct{ addr, path string }{
		{f.url + "/v1/", "/v1/records"},
		{f.url + "/v1", "/v1/records"},
		{strings.TrimPrefix(f.url, "http://") + "/v1", "/v1/records"},
		{f.url + "/idem/v1/", "/idem/v1/records"},
		{f.url + "/idem", "/idem/v1/records"},
		{"127.0.0.1:1/v1," + f.url + "/v1", "/v1/records"},
	} {
		f.path = ""
		code, _, stderr := runClientCmd(t, runGet, "--addr", tc.addr, "--principal", "p", "--endpoint", "e", "--key", "k")
		if code != 0 || f.path != tc.path {
			t.Errorf("--addr %s: exit %d, stderr %q, sent %q, want %q", tc.addr, code, stderr, f.path, tc.path)
		}
	}
	// idem cluster and snapshot save take the same addresses.
	f.path = ""
	code, _, stderr := runClientCmd(t, runCluster, "status", "--json", "--addr", f.url+"/v1/")
	if code != 0 || f.path != "/v1/cluster" {
		t.Errorf("cluster status --addr %s/v1/: exit %d, stderr %q, sent %q", f.url, code, stderr, f.path)
	}
	f.path = ""
	runClientCmd(t, runSnapshot, "save", filepath.Join(t.TempDir(), "snap"), "--addr", f.url+"/v1")
	if f.path != "/v1/admin/snapshot" {
		t.Errorf("snapshot save --addr %s/v1: sent %q", f.url, f.path)
	}
}

// IDEM_AUTH_TOKEN is read when --auth-token is not given, but is never
// the flag's default: --help prints defaults, and an admin token landed
// in terminals and CI logs (review finding).
func TestAuthTokenFromEnvIsNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-from-env"
	t.Setenv("IDEM_AUTH_TOKEN", secret)
	for name, run := range map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"cluster": runCluster, "snapshot": runSnapshot, "bench": runBench, "keys": runKeys,
	} {
		for _, args := range [][]string{{"--help"}, {"status", "--help"}, {"save", "--help"}} {
			_, stdout, stderr := runClientCmd(t, run, args...)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("idem %s %v printed the token of IDEM_AUTH_TOKEN", name, args)
			}
		}
	}
	f := newAPIFake(t, http.StatusOK, `{}`)
	runClientCmd(t, runCluster, "status", "--addr", f.url)
	if f.auth != "Bearer "+secret {
		t.Errorf("cluster status sent Authorization %q, want the token of IDEM_AUTH_TOKEN", f.auth)
	}
	runClientCmd(t, runCluster, "status", "--addr", f.url, "--auth-token", "from-flag")
	if f.auth != "Bearer from-flag" {
		t.Errorf("cluster status sent Authorization %q, want --auth-token's", f.auth)
	}
}

// snapshot save into a directory that does not exist says which directory
// and how to make it, before it asks the node for a snapshot (a backup
// streamed for nothing), instead of FILE.tmp's "no such file or directory".
func TestSnapshotSaveIntoAMissingDirectoryNamesIt(t *testing.T) {
	f := newAPIFake(t, http.StatusOK, "")
	missing := filepath.Join(t.TempDir(), "backups")
	file := filepath.Join(missing, "idem.snap")
	code, _, stderr := runClientCmd(t, runSnapshot, "save", file, "--addr", f.url)
	want := "idem snapshot save: the directory of " + file + ", " + missing + ", does not exist"
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "mkdir -p "+missing) {
		t.Fatalf("exit %d, stderr %q; want exit 1, %q and the mkdir to run", code, stderr, want)
	}
	if f.path != "" {
		t.Errorf("asked the node for %s before finding the directory missing", f.path)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s: %v; nothing may be created", missing, err)
	}
}

// Bug (an operator walk): two saves into one FILE (two cron jobs, a save
// run again while the first still streams) shared FILE.tmp: the second
// truncated and wrote over the first's stream, and both were refused as
// "incomplete or damaged", blaming the node (3 rounds of 8). Each save has
// a temporary file of its own: here the first is held mid-stream while the
// second saves, then finishes, and both are whole.
func TestTwoSavesIntoOneFileBothSucceed(t *testing.T) {
	node := idemtest.Start(t, idemtest.Options{})
	resp, err := http.Get(node.URL + "/v1/admin/snapshot")
	require.NoError(t, err)
	snap, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", snap)

	// A node whose stream stops half-way until released.
	release := make(chan struct{})
	started := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(snap)))
		w.Write(snap[:len(snap)/2])
		w.(http.Flusher).Flush()
		close(started)
		<-release
		w.Write(snap[len(snap)/2:])
	}))
	defer slow.Close()

	file := filepath.Join(t.TempDir(), "idem.snap")
	first := make(chan string, 1)
	go func() {
		code, _, stderr := runClientCmd(t, runSnapshot, "save", file, "--force", "--addr", slow.URL)
		first <- fmt.Sprintf("exit %d: %s", code, stderr)
	}()
	<-started
	code, _, stderr := runClientCmd(t, runSnapshot, "save", file, "--force", "--addr", node.URL)
	require.Equal(t, 0, code, stderr)
	close(release)
	require.Equal(t, "exit 0: ", <-first)
	code, _, stderr = runClientCmd(t, runSnapshot, "inspect", file)
	require.Equal(t, 0, code, stderr)
	left, err := filepath.Glob(file + ".tmp*")
	require.NoError(t, err)
	require.Empty(t, left)
}

// set-retention on a cluster whose retention no claim had pinned says it
// pinned it, not "nothing changed" (the leader's --retention, the answer's
// previous_retention, was the same value).
func TestSetRetentionSaysItPinned(t *testing.T) {
	f := newAPIFake(t, http.StatusOK, `{"outcome":"set","retention":"24h0m0s","retention_seconds":86400,"previous_retention":"24h0m0s","first_pin":true}`)
	code, out, errOut := runClientCmd(t, runCluster, "set-retention", "--retention", "24h", "--addr", f.url)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Equal(t, "/v1/admin/retention", f.path)
	require.Contains(t, out, "the cluster's retention is 24h0m0s, pinned now (no claim had pinned one)")
	require.NotContains(t, out, "nothing changed")
}

// A save into a path whose directory is a file (old.snap/new.snap, a
// FILE typed after a backup's name) was told to create it with mkdir -p,
// which fails there with "File exists". The message says it is a file.
func TestSnapshotSaveUnderAFileSaysItIsAFile(t *testing.T) {
	f := newAPIFake(t, http.StatusOK, "")
	old := filepath.Join(t.TempDir(), "old.snap")
	require.NoError(t, os.WriteFile(old, []byte("a backup"), 0o600))
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(old, "new.snap"), "the directory of " + filepath.Join(old, "new.snap") + ", " + old + ", is a file, not a directory"},
		{filepath.Join(old, "d", "new.snap"), "a part of that path is a file, not a directory"},
	} {
		code, _, stderr := runClientCmd(t, runSnapshot, "save", tc.file, "--addr", f.url)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, tc.want)
		require.NotContains(t, stderr, "mkdir")
	}
	require.Empty(t, f.path, "the node was asked")
}

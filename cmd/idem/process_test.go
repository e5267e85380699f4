package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// These tests build the real binary and run it as a process: real Pebble on
// disk, real raft over TCP, real signals.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "idem")
	build := []string{"build", "-o", binary, "."}
	// IDEM_TEST_RACE=1 builds the binary with -race: the nodes, proxies
	// and bench clients these tests start then report their data races,
	// which go test -race on this package never sees (it instruments the
	// test process, not the binary it runs). Every child writes its
	// reports into one directory (GORACE log_path), and the run fails if
	// any child wrote one.
	raceDir := ""
	if os.Getenv("IDEM_TEST_RACE") == "1" {
		build = []string{"build", "-race", "-o", binary, "."}
		raceDir = filepath.Join(dir, "race")
		if err := os.Mkdir(raceDir, 0o755); err != nil {
			panic(err)
		}
		os.Setenv("GORACE", "halt_on_error=0 log_path="+filepath.Join(raceDir, "report"))
	}
	out, err := exec.Command("go", build...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if raceDir != "" {
		reports, _ := filepath.Glob(filepath.Join(raceDir, "report.*"))
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			fmt.Fprintf(os.Stderr, "data race in a child idem process (%s):\n%s\n", filepath.Base(r), b)
		}
		if len(reports) > 0 {
			fmt.Fprintf(os.Stderr, "IDEM_TEST_RACE: %d child process(es) reported data races\n", len(reports))
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a port that was free a moment ago on 127.0.0.9, an
// address nothing else on the machine uses, so no other process's
// ephemeral ports can take it before the node binds it.
func freePort(t *testing.T) string {
	t.Helper()
	return freePortOn(t, testIP("127.0.0.9"))
}

// testIP is ip, or IDEM_TEST_IP when set: a shared machine can give a
// run its own address instead of 127.0.0.9.
func testIP(ip string) string {
	if v := os.Getenv("IDEM_TEST_IP"); v != "" {
		return v
	}
	return ip
}

type proc struct {
	cmd  *exec.Cmd
	http string
	raft string
	logs *logBuffer
	done chan struct{}
	err  error
}

// logBuffer collects a process's output; tests may read it while the
// process still writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitForLine waits (10 s at most) until logs holds want, and returns
// logs then. A process's line reaches logs through a pipe and a goroutine
// of the test's own, so even a line written before the answer the test
// just read can reach logs a moment after it; one written by another
// goroutine of the process, later. Read at once only after the process
// exited (Wait drains the pipe) or after waiting for a line it wrote
// later.
func waitForLine(t *testing.T, logs *logBuffer, want string) string {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("the line %q", want), func() (bool, string) {
		s := logs.String()
		if strings.Contains(s, want) {
			return true, ""
		}
		if len(s) > 2000 {
			s = "..." + s[len(s)-2000:]
		}
		return false, "the log ends:\n" + s
	})
	return logs.String()
}

// serving is the start line `idem serve` writes once it serves, after
// every line of its start: waited for (waitForLine), the lines before it
// are in the log, and a line of the start that must not be there is not.
const serving = `msg="idem serving"`

// wait returns the exit error once the process has exited.
func (p *proc) wait() error {
	<-p.done
	return p.err
}

// withFlags is base (a command and "--flag value" pairs) with args after
// it, less base's pairs of the flags args gives again: a flag given twice
// is refused.
func withFlags(base []string, args ...string) []string {
	given := map[string]bool{}
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			given[a] = true
		}
	}
	var out []string
	for i := 0; i < len(base); i++ {
		if given[base[i]] && i+1 < len(base) {
			i++
			continue
		}
		out = append(out, base[i])
	}
	return append(out, args...)
}

// launch runs `idem serve` with args without waiting for it to be ready.
func launch(t *testing.T, dataDir, httpAddr, raftAddr string, args ...string) *proc {
	t.Helper()
	all := append([]string{"serve", "--data-dir", dataDir, "--http-addr", httpAddr, "--raft-addr", raftAddr}, args...)
	p := &proc{cmd: exec.Command(binary, all...), http: httpAddr, raft: raftAddr, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
		if t.Failed() {
			t.Logf("logs of %s (%s):\n%s", httpAddr, strings.Join(args, " "), p.logs)
		}
	})
	return p
}

// start runs `idem serve` with args and waits for /readyz.
func start(t *testing.T, dataDir, httpAddr, raftAddr string, args ...string) *proc {
	t.Helper()
	p := launch(t, dataDir, httpAddr, raftAddr, args...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node on %s never became ready; logs:\n%s", httpAddr, p.logs)
	return nil
}

func post(t *testing.T, addr, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func get(t *testing.T, addr, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

const claimBody = `{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","fingerprint":"9f86d081884c7d65"}`

func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)

	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	var claimed struct{ Token string }
	require.NoError(t, json.Unmarshal(body, &claimed))
	code, body = post(t, httpAddr, "/v1/complete", `{"principal":"cus_42","endpoint":"POST /payments","key":"retry-1","token":"`+claimed.Token+
		`","response":{"status":201,"content_type":"application/json","headers":{"Location":"/payments/py_1"},"body":"eyJpZCI6InB5XzEifQ=="}}`)
	require.Equal(t, 200, code, "%s", body)
	code, replay := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 200, code, "%s", replay)
	// A second record, only claimed, must survive as in_progress.
	code, body = post(t, httpAddr, "/v1/claim", `{"principal":"cus_7","endpoint":"POST /payments","key":"k2","fingerprint":"aa"}`)
	require.Equal(t, 201, code, "%s", body)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait()

	start(t, dir, httpAddr, raftAddr)
	code, again := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 200, code, "%s", again)
	require.Equal(t, string(replay), string(again), "replay after kill -9 is not byte-identical")
	code, body = get(t, httpAddr, "/v1/records?principal=cus_7&endpoint=POST%20/payments&key=k2")
	require.Equal(t, 200, code, "%s", body)
	require.Contains(t, string(body), `"state":"in_progress"`)
	code, body = post(t, httpAddr, "/v1/claim", `{"principal":"cus_7","endpoint":"POST /payments","key":"k2","fingerprint":"aa"}`)
	require.Equal(t, 409, code, "the lease of the claim before the crash must still hold: %s", body)
}

func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	_, body := get(t, addr, "/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			var v float64
			fmt.Sscan(f[1], &v)
			return v
		}
	}
	t.Fatalf("metric %s not exposed", name)
	return 0
}

func TestExpiredBucketIsDropped(t *testing.T) {
	httpAddr := freePort(t)
	start(t, t.TempDir(), httpAddr, freePort(t), "--retention", "2s", "--allow-short-retention", "--bucket-width", "1s")
	code, body := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	const lookup = "/v1/records?principal=cus_42&endpoint=POST%20/payments&key=retry-1"
	code, _ = get(t, httpAddr, lookup)
	require.Equal(t, 200, code)
	require.Equal(t, 1.0, metric(t, httpAddr, "idem_records"))

	deadline := time.Now().Add(20 * time.Second)
	for metric(t, httpAddr, "idem_buckets_dropped_total") < 1 || metric(t, httpAddr, "idem_records") != 0 {
		require.True(t, time.Now().Before(deadline), "the expired bucket was never dropped")
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, 1.0, metric(t, httpAddr, "idem_records_dropped_total"))
	require.Equal(t, 0.0, metric(t, httpAddr, "idem_buckets"), "no bucket may remain on disk")
	code, _ = get(t, httpAddr, lookup)
	require.Equal(t, 404, code)
	code, body = post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "%s", body)
	require.Contains(t, string(body), `"attempt":1`)
}

func TestSIGTERMStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	code, _ := post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 201, code)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		require.NoError(t, p.err, "exit status after SIGTERM")
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20s after SIGTERM")
	}
	require.Contains(t, p.logs.String(), "msg=stopped")
	require.NotContains(t, p.logs.String(), "leadership transfer", "a one-node cluster has no one to hand over to, and nothing to say about it")
	start(t, dir, httpAddr, raftAddr)
	code, _ = post(t, httpAddr, "/v1/claim", claimBody)
	require.Equal(t, 409, code)
}

func TestServeRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--bucket-width", "30m")
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bucket-width", "1h"}, "--bucket-width 1h0m0s differs from 30m0s"},
		{[]string{"--retention", "30s"}, "--allow-short-retention"},
		{[]string{"--scope", "tenant"}, "--scope"},
		{[]string{"--scope", "principal"}, "--scope principal differs from endpoint"},
		{[]string{"--node-id", "n2"}, `--node-id "n2" differs from "n1"`},
		{[]string{"--lease", "10ms"}, "--lease"},
		{[]string{"--max-response-bytes", "0"}, "--max-response-bytes"},
		{[]string{"--node-id", "bad id"}, "--node-id"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout -1s must not be negative"}, // a CLI walk: accepted
		{[]string{"--http-addr", "0.0.0.0:" + strings.Split(freePort(t), ":")[1]}, "--auth-file"},
	} {
		args := append([]string{"serve", "--data-dir", dir, "--raft-addr", raftAddr}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--http-addr") {
			args = append(args, "--http-addr", httpAddr)
		}
		out, err := exec.Command(binary, args...).CombinedOutput()
		require.Error(t, err, "idem %v must refuse", tc.args)
		require.Contains(t, string(out), tc.want)
		// A flag that conflicts with the data dir (--bucket-width, --scope,
		// --node-id) is a usage error, exit 2, as a bad flag value is: it
		// exited 1, the status of a failure at run time.
		if strings.Contains(tc.want, "differs from") {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 2, ee.ExitCode(), "idem %v:\n%s", tc.args, out)
		}
	}
	// The refused starts changed nothing: the node still starts as created.
	start(t, dir, httpAddr, raftAddr)
	var cfg struct {
		BucketWidth string `json:"bucket_width"`
	}
	_, body := get(t, httpAddr, "/v1/config")
	require.NoError(t, json.Unmarshal(body, &cfg))
	require.Equal(t, "30m0s", cfg.BucketWidth)
}

func TestEnvironmentVariablesSetFlags(t *testing.T) {
	httpAddr := freePort(t)
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(), "IDEM_DATA_DIR="+t.TempDir(), "IDEM_HTTP_ADDR="+httpAddr,
		"IDEM_RAFT_ADDR="+freePort(t), "IDEM_RETENTION=36h", "IDEM_SCOPE=principal")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/v1/config")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Contains(t, string(b), `"retention":"36h0m0s"`)
			require.Contains(t, string(b), `"scope":"principal"`)
			return
		}
		require.True(t, time.Now().Before(deadline), "never served; logs:\n%s", logs.String())
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	out, err := exec.Command(binary, "serve", "--help").CombinedOutput()
	require.NoError(t, err)
	for _, f := range []string{"--node-id", "--data-dir", "--http-addr", "--raft-addr", "--join", "--retention",
		"--allow-short-retention", "--lease", "--max-response-bytes", "--max-keys-per-principal", "--scope",
		"--auth-file", "--insecure", "--bucket-width", "--log-level", "--log-format"} {
		require.Regexp(t, `(?m)^  `+f+`( |$)`, string(out), "serve --help lacks %s", f)
		require.Contains(t, string(out), envName(f[2:]), "serve --help lacks the variable of %s", f)
	}
	out, err = exec.Command(binary, "version").CombinedOutput()
	require.NoError(t, err)
	require.Contains(t, string(out), "idem ")
}

// idem bench works against a real node and its correctness check holds:
// no fresh claim lost, no duplicate won, no wrong answer. (A smoke run: the
// figures it prints are not asserted.)
func TestBenchRunsAndChecksCorrectness(t *testing.T) {
	httpAddr := freePort(t)
	start(t, t.TempDir(), httpAddr, freePort(t))
	hist := filepath.Join(t.TempDir(), "latency.svg")
	prof := filepath.Join(t.TempDir(), "bench.pprof")
	out, err := exec.Command(binary, "bench", "--addr", httpAddr, "--duration", "2s", "--warmup", "0s",
		"--concurrency", "16", "--mix", "fresh=40,dup=20,complete=20,lookup=20", "--quiet", "--hist", hist,
		"--cpuprofile", prof).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "correctness: ok")
	for _, op := range []string{"fresh", "dup", "complete", "lookup"} {
		require.Contains(t, string(out), op)
	}
	svg, err := os.ReadFile(hist)
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	// The load generator's own profile: gzipped protobuf, as go tool pprof reads it.
	f, err := os.Open(prof)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err, "--cpuprofile wrote no gzipped profile")
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NotEmpty(t, b)

	out, err = exec.Command(binary, "bench", "--addr", httpAddr, "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "p")).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "--cpuprofile")
}

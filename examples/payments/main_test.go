package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The README's walk-through, against a real `idem serve` process (built from
// cmd/idem) and the service over HTTP with its SQLite database.

var idemBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payments-example")
	if err != nil {
		panic(err)
	}
	idemBinary = filepath.Join(dir, "idem")
	if out, err := exec.Command("go", "build", "-o", idemBinary, "../../cmd/idem").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startIdem runs a one-node store and waits until it is ready.
func startIdem(t *testing.T) string {
	httpAddr := freeAddr(t)
	cmd := exec.Command(idemBinary, "serve", "--data-dir", filepath.Join(t.TempDir(), "idem"),
		"--http-addr", httpAddr, "--raft-addr", freeAddr(t))
	var logs strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("idem logs:\n%s", logs.String())
			mu.Unlock()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return httpAddr
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("idem never became ready")
	return ""
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func pay(t *testing.T, url, apiKey, key, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%d %s", resp.StatusCode, raw)
	return reply{resp.StatusCode, resp.Header, m}
}

func TestWalkThrough(t *testing.T) {
	idem := startIdem(t)
	db, err := openStore(filepath.Join(t.TempDir(), "payments.db"))
	require.NoError(t, err)
	defer db.Close()
	h, err := newService(db, idem, "")
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	const order = `{"customer":"cus_1","amount":1999,"currency":"eur"}`

	// 1. Pay: 201, one payment.
	first := pay(t, srv.URL, "sk_test_acme", "order-1", order)
	require.Equal(t, 201, first.status, first.body)
	require.Empty(t, first.header.Get("Idempotency-Replayed"))
	id := first.body["id"].(string)
	require.Equal(t, "/payments/"+id, first.header.Get("Location"))

	// 2. Retry: the same answer, replayed; nothing charged again.
	again := pay(t, srv.URL, "sk_test_acme", "order-1", order)
	require.Equal(t, 201, again.status)
	require.Equal(t, "true", again.header.Get("Idempotency-Replayed"))
	require.Equal(t, first.body, again.body)
	n, err := db.count(context.Background(), "acme")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Another merchant with the same key is another payment.
	other := pay(t, srv.URL, "sk_test_globex", "order-1", order)
	require.Equal(t, 201, other.status)
	require.NotEqual(t, id, other.body["id"])

	// 3. A concurrent retry while the first attempt runs: 409.
	done := make(chan reply, 1)
	go func() {
		done <- pay(t, srv.URL, "sk_test_acme", "order-2", order, "X-Simulate-Delay", "1500ms")
	}()
	// Wait until the first attempt holds the key in the store.
	recURL := "http://" + idem + "/v1/records?principal=acme&endpoint=POST%20%2Fpayments&key=order-2"
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(recURL)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), `"state":"in_progress"`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the first attempt never claimed: %s", raw)
		time.Sleep(10 * time.Millisecond)
	}
	conflict := pay(t, srv.URL, "sk_test_acme", "order-2", order)
	require.Equal(t, 409, conflict.status, conflict.body)
	require.Equal(t, "in_progress", conflict.body["code"])
	require.NotEmpty(t, conflict.header.Get("Retry-After"))
	slow := <-done
	require.Equal(t, 201, slow.status, slow.body)

	// 4. The same key with a changed body: 422, the first payment untouched.
	changed := pay(t, srv.URL, "sk_test_acme", "order-1", `{"customer":"cus_1","amount":2999,"currency":"eur"}`)
	require.Equal(t, 422, changed.status, changed.body)
	require.Equal(t, "fingerprint_mismatch", changed.body["code"])
	n, err = db.count(context.Background(), "acme")
	require.NoError(t, err)
	require.Equal(t, 2, n, "order-1 and order-2, each once")
	got, ok, err := db.get(context.Background(), "acme", id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1999), got.Amount)
	require.Equal(t, uint32(1), got.Attempt)

	// No key: 400 before the handler runs; a bad API key: 401.
	nokey := pay(t, srv.URL, "sk_test_acme", "", order)
	require.Equal(t, 400, nokey.status)
	require.Equal(t, 401, pay(t, srv.URL, "sk_nope", "order-9", order).status)
}

// TestStaleAttemptIsRefusedByTheDatabase: the fence in SQLite. An attempt
// that lost its lease to a newer one cannot write, and a newer attempt finds
// the payment an older one made (and crashed before storing its answer)
// instead of charging twice.
func TestStaleAttemptIsRefusedByTheDatabase(t *testing.T) {
	db, err := openStore(filepath.Join(t.TempDir(), "payments.db"))
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	mk := func(attempt uint32, id string) payment {
		return payment{ID: id, Customer: "c", Amount: 5, Currency: "eur", Status: "succeeded", CreatedAt: now(),
			Attempt: attempt, principal: "acme", key: "k", token: fmt.Sprintf("%020d.mac", attempt)}
	}

	// Attempt 2 took the key over and charged.
	p2, created, err := db.record(ctx, mk(2, "py_2"))
	require.NoError(t, err)
	require.True(t, created)

	// Attempt 1, stale, wakes up and tries to write: refused, nothing written.
	_, _, err = db.record(ctx, mk(1, "py_1"))
	require.ErrorIs(t, err, errStaleAttempt)
	n, err := db.count(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Attempt 3 (attempt 2 crashed after charging, before idem stored its
	// answer) gets attempt 2's payment, not a second charge, and fences it.
	p3, created, err := db.record(ctx, mk(3, "py_3"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, p2.ID, p3.ID)
	require.Equal(t, uint32(3), p3.Attempt)
	_, _, err = db.record(ctx, mk(2, "py_2b"))
	require.ErrorIs(t, err, errStaleAttempt, "attempt 2 is now stale too")
	n, err = db.count(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
